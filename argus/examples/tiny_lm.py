"""A tiny causal LM, its tokenizer and a few rows of data, made locally: enough for real
verl to load a model, tokenize a dataset and build its workers, with nothing downloaded.

    python -m argus.examples.tiny_lm MODEL_DIR DATA_DIR

Writes a random-init Qwen2-shaped model (2 layers, hidden size 32) with a word-level
tokenizer over a small vocabulary and a chat template, and ``train.parquet`` /
``val.parquet`` in the layouts verl's RL dataset (``prompt`` as chat messages,
``reward_model.ground_truth``, ``data_source``) and its SFT datasets (``messages``, or
``question`` / ``answer``) read. Needs ``transformers``, ``tokenizers`` and ``pyarrow`` (``.[verl]``).
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["make_tiny_data", "make_tiny_model"]

SPECIAL = ["<pad>", "<unk>", "<s>", "</s>", "<|user|>", "<|assistant|>"]
WORDS = ["what", "is", "plus", "minus", "mod", "the", "answer", "?", "#", "system", "user", "assistant", ":",
         *[str(i) for i in range(20)]]
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ '<|' + m['role'] + '|> ' + m['content'] + ' </s> ' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|> ' }}{% endif %}"
)


def make_tiny_model(dest: Path) -> Path:
    """A random-init causal LM and its tokenizer, saved in Hugging Face layout at ``dest``."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    vocab = {token: i for i, token in enumerate([*SPECIAL, *WORDS])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", pad_token="<pad>",
                                        bos_token="<s>", eos_token="</s>")
    tokenizer.chat_template = CHAT_TEMPLATE
    dest.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(dest)
    config = Qwen2Config(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
                         tie_word_embeddings=True, pad_token_id=vocab["<pad>"], bos_token_id=vocab["<s>"],
                         eos_token_id=vocab["</s>"])
    Qwen2ForCausalLM(config).save_pretrained(dest)
    return dest


def make_tiny_data(dest: Path, rows: int = 16) -> tuple[Path, Path]:
    """``train.parquet`` and ``val.parquet`` of small sums, for RL and SFT alike."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def table(split: str, start: int) -> pa.Table:
        items = []
        for i in range(start, start + rows):
            a, b = i % 10, (i * 3) % 10
            question = f"what is {a} plus {b} ?"
            answer = str((a + b) % 20)
            items.append({
                "data_source": "openai/gsm8k", "ability": "math",
                "prompt": [{"role": "user", "content": question}],
                "reward_model": {"style": "rule", "ground_truth": answer},
                "extra_info": {"split": split, "index": i, "question": question, "answer": f"# {answer}"},
                "question": question, "answer": f"the answer is # {answer}",
                "messages": [{"role": "user", "content": question},
                             {"role": "assistant", "content": f"the answer is # {answer}"}],
            })
        return pa.Table.from_pylist(items)

    dest.mkdir(parents=True, exist_ok=True)
    train, val = dest / "train.parquet", dest / "val.parquet"
    pq.write_table(table("train", 0), train)
    pq.write_table(table("test", 1000), val)
    return train, val


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(__doc__.split("\n\n")[1].strip(), file=sys.stderr)
        return 2
    print(make_tiny_model(Path(args[0])))
    for path in make_tiny_data(Path(args[1])):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
