"""``python -m youmu``: the ``youmu`` command (:func:`youmu.cli.main`) where the console
script is not on ``PATH`` (a virtual environment not activated, a notebook's ``!``).

Example::

    $ python -m youmu inspect data/part-0.parquet
"""

import sys

from youmu.cli import main

__all__: list[str] = []

if __name__ == "__main__":
    sys.exit(main())
