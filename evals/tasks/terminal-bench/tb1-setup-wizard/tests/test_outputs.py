import configparser


def read():
    cfg = configparser.ConfigParser()
    assert cfg.read("/app/service.ini"), "/app/service.ini was not written"
    return cfg["service"]


def test_name():
    assert read()["name"] == "horizon"


def test_port():
    assert read()["port"] == "8042"


def test_written_by_wizard():
    assert read()["configured_by"] == "wizard"
