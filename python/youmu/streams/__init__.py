"""The stream core: ``core`` (``ShardedStream``/``PositionalStream``), the Parquet stream
(``parquet``, ``spec``, ``rowstream``), rows and their conversion (``rows``, ``convert``),
the transform kinds (``batched``, ``skips``), the page grid and the Hugging Face Hub resolver."""
