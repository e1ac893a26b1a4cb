"""Fine-tune a grader on `gagar distill` output with TRL's SFTTrainer, the loss on assistant tokens only.

    python examples/train_grader/train.py --data runs/distill --model Qwen/Qwen2.5-1.5B-Instruct \
        --out runs/grader-sft --template qwen2_5

`--data` is the distill folder (sft.jsonl, sft_eval.jsonl). The chat template is TRL's training variant of the
model's own (`trl/chat_templates/<name>_training.jinja`): the same text as the model's template, with
`{% generation %}` around assistant turns so that `assistant_only_loss` can mask everything else (system
prompt, task, tool results). Rows are read with an explicit schema: each message a JSON object, so tool-call
arguments stay objects (a template serializes them itself) and no message gains the others' keys.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def training_template(name: str) -> str:
    """TRL's training chat template `name` (e.g. "qwen2_5"), with the generation markers the loss mask needs.

    Args:
        name: the template's name in `trl/chat_templates/` without `_training.jinja`.

    Returns:
        The Jinja text.

    Raises:
        FileNotFoundError: TRL ships no training template of that name (the message lists those it has).
    """
    import trl

    folder = Path(trl.__file__).parent / "chat_templates"
    path = folder / f"{name}_training.jinja"
    if not path.is_file():
        known = sorted(p.name.removesuffix("_training.jinja") for p in folder.glob("*_training.jinja"))
        raise FileNotFoundError(f"TRL has no training template {name!r}; it has: {', '.join(known)}")
    return path.read_text(encoding="utf-8")


def load_sft(path: Path | str) -> Any:
    """A `gagar distill` JSONL file as a `datasets.Dataset` (messages as JSON objects, tools as JSON text).

    Args:
        path: sft.jsonl or sft_eval.jsonl.

    Returns:
        The dataset, with columns `messages` and `tools`.
    """
    from datasets import Features, Json, List, Value, load_dataset

    features = Features({"messages": List(Json()), "tools": Value("string")})
    return load_dataset("json", data_files=str(path), split="train", features=features)


def build_trainer(
    model: Any,
    tokenizer: Any,
    train: Any,
    out: Path | str,
    evaluation: Any = None,
    max_steps: int = 200,
    learning_rate: float = 1e-5,
    batch_size: int = 1,
    max_length: int = 16384,
    **config: Any,
) -> Any:
    """An SFTTrainer over distilled transcripts, the loss on assistant tokens only.

    Args:
        model: the model to fine-tune.
        tokenizer: its tokenizer, its `chat_template` a training template (`training_template`).
        train: the training rows (`load_sft`).
        out: where checkpoints go.
        evaluation: the eval rows, or None.
        max_steps: optimizer steps.
        learning_rate: the learning rate.
        batch_size: rows per device and step.
        max_length: tokens kept per row (longer rows are cut).
        **config: further `trl.SFTConfig` fields.

    Returns:
        The trainer; call `.train()`.
    """
    from trl import SFTConfig, SFTTrainer

    args = SFTConfig(
        output_dir=str(out),
        assistant_only_loss=True,
        max_length=max_length,
        max_steps=max_steps,
        learning_rate=learning_rate,
        per_device_train_batch_size=batch_size,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        **config,
    )
    return SFTTrainer(
        model=model, args=args, train_dataset=train, eval_dataset=evaluation, processing_class=tokenizer
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, type=Path, help="the gagar distill output folder")
    parser.add_argument("--model", required=True, help="model name or local path")
    parser.add_argument("--out", required=True, type=Path, help="where the fine-tuned model is saved")
    parser.add_argument("--template", default="qwen2_5", help="TRL training template (default: qwen2_5)")
    parser.add_argument("--max-steps", type=int, default=200)
    parser.add_argument("--learning-rate", type=float, default=1e-5)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--max-length", type=int, default=16384)
    args = parser.parse_args(argv)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    serving_template = tokenizer.chat_template
    tokenizer.chat_template = training_template(args.template)
    model = AutoModelForCausalLM.from_pretrained(args.model)
    evaluation = args.data / "sft_eval.jsonl"
    trainer = build_trainer(
        model,
        tokenizer,
        load_sft(args.data / "sft.jsonl"),
        args.out,
        evaluation=load_sft(evaluation) if evaluation.stat().st_size else None,
        max_steps=args.max_steps,
        learning_rate=args.learning_rate,
        batch_size=args.batch_size,
        max_length=args.max_length,
    )
    trainer.train()
    tokenizer.chat_template = serving_template  # served with the model's own template
    trainer.save_model(str(args.out))
    tokenizer.save_pretrained(str(args.out))
    print(f"saved {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
