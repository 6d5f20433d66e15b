"""SWE-bench instances (JSON, JSONL, parquet): loaded and graded by the official rules, see
evals/swebench/ (this module keeps the adapter's place next to the other formats)."""

from evals.swebench.instances import SweInstance, is_swe_file, load_swe_file

__all__ = ["SweInstance", "is_swe_file", "load_swe_file"]
