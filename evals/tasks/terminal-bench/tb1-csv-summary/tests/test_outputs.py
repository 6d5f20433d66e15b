import json
from pathlib import Path


def load():
    return json.loads(Path("/app/summary.json").read_text())


def test_regions():
    data = load()
    assert data["north"] == 65.0
    assert data["south"] == 20.0
    assert data["east"] == 13.75


def test_grand_total():
    assert load()["_total"] == 98.75


def test_no_extra_keys():
    assert set(load()) == {"north", "south", "east", "_total"}
