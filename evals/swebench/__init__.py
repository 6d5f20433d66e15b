"""SWE-bench with the official rules, by way of the `swebench` package (4.x).

instances.py loads SWE-bench records (JSON, JSONL, parquet) and fetches each repository at its
base commit; specs.py turns a record into swebench's TestSpec (its per-repository install and test
commands, the eval script it generates); images.py pulls the harness's `sweb.eval.*` image or
builds it from the TestSpec's base/env/instance Dockerfiles; grader.py runs the eval script on the
agent's patch in a fresh offline container and grades the log with swebench's own parser and
grading functions; report.py writes swebench's per-instance and run reports.
"""
