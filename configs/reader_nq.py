"""DPR's extractive reader on NQ (docs/readers.md): BERT-base, 24 passages, 350 word pieces.

Its training data is a retriever's results on the NQ train and dev questions:

    python -m dense_cf.cli.reader_data --retriever runs/dpr_nq --split train
    python -m dense_cf.cli.reader_data --retriever runs/dpr_nq --split dev
    python -m dense_cf.main --config=configs/reader_nq.py --workdir=runs/reader_nq \\
        --config.reader.train_file=runs/dpr_nq/reader_data/step_N/train/retrieval.json \\
        --config.reader.dev_file=runs/dpr_nq/reader_data/step_N/dev/retrieval.json

(DPR's own published retriever results on train/dev are in the same format and work as they
are.) Then ``python -m dense_cf.eval.e2e --retriever runs/dpr_nq --retriever runs/picl_nq
--reader runs/reader_nq``.
"""

from dense_cf.configs.presets import reader_config


def get_config():
    return reader_config("nq")
