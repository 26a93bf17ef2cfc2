"""Loads kestrel_task's data for lm-eval (kestrel_task.yaml's custom_dataset).

lm-eval calls load(**metadata) with its --metadata JSON merged with --model_args; data_dir names
the folder that bench/lm_eval/make_task.py wrote (DIR/test.jsonl).
"""
from pathlib import Path

import datasets


def load(data_dir=None, **_):
    if not data_dir:
        raise ValueError("kestrel_task needs --metadata '{\"data_dir\": \"DIR\"}' "
                         "(DIR from bench/lm_eval/make_task.py DIR)")
    path = Path(data_dir).expanduser().resolve() / "test.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path} (run bench/lm_eval/make_task.py {data_dir})")
    return datasets.load_dataset("json", data_files={"test": str(path)})
