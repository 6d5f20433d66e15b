"""CyberGym (sunblaze-ucb/cybergym) as CyberGym runs it: its task folders and data entries
(layout.py, generate.py), the vulnerable and fixed builds (builds.py, build_from_source.sh), PoC
runs with its exit-code rule (executor.py) and the per-trial submission server the agent's
submit.sh reaches through a unix socket (server.py, service.py). The adapter is
evals/adapters/cybergym.py, the grader evals/graders/poc.py."""
