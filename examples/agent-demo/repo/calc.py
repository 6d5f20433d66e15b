"""A tiny calculator with a bug for the agent to fix."""


def add(a, b):
    return a - b


def mean(values):
    return add(values[0], sum(values[1:])) / len(values)
