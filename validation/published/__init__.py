"""Published measurements: one TOML file per public curve or table (``corpus/``), their
strict loading (``corpus.py``) and a parser of nccl-tests output (``nccl_tests.py``)."""
