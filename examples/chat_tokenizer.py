"""A chat tokenizer built here, never downloaded: a byte-level BPE trained with
``tokenizers`` on whatever corpus you give it (BOS/EOS from its post-processor), and the
same wrapped as a ``transformers.PreTrainedTokenizerFast`` with a ChatML chat template
whose assistant answers are ``{% generation %}`` blocks — what
:class:`youmu.text.ChatTemplate` needs to label the assistant's tokens. Used by the SFT
demo (``sft_demo.py``) and by the text tests.

    from chat_tokenizer import train_bpe, chat_tokenizer
    tok = chat_tokenizer(train_bpe(["some text", "more text"] * 10, vocab_size=300))
    tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["SPECIALS", "CHATML", "CHATML_PUBLISHED", "train_bpe", "chat_tokenizer"]

#: Special tokens: BOS/EOS/pad, ChatML's turn markers and Qwen2-VL's vision markers.
SPECIALS = ["<s>", "</s>", "<pad>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
            "<|image_pad|>"]

#: ChatML, as Qwen's templates write it, with the assistant's answer and its end token
#: in {% generation %} so transformers can mark them.
CHATML = (
    "{% for m in messages %}"
    "{{ '<|im_start|>' + m['role'] + '\\n' }}"
    "{% if m['role'] == 'assistant' %}"
    "{% generation %}{{ m['content'] + '<|im_end|>' }}{% endgeneration %}"
    "{% else %}{{ m['content'] + '<|im_end|>' }}{% endif %}"
    "{{ '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


#: ChatML as Qwen publishes it: the same text as :data:`CHATML` with no
#: ``{% generation %}`` block (youmu finds the assistant's answers by rendering it).
CHATML_PUBLISHED = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
                    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

def train_bpe(corpus: Iterable[str], vocab_size: int = 600) -> Any:
    """A byte-level BPE of ``vocab_size`` tokens (:data:`SPECIALS` first) trained on
    ``corpus``, whose post-processor adds ``<s>`` … ``</s>``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", tok.token_to_id("<s>")), ("</s>", tok.token_to_id("</s>"))])
    return tok


def chat_tokenizer(bpe: Any, template: str = CHATML) -> Any:
    """``bpe`` (a ``tokenizers.Tokenizer``) as a ``transformers`` fast tokenizer with
    ``template`` as its chat template."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   chat_template=template)
