"""Fixtures: a generated tiny checkpoint, a config naming it, one engine for
the session. libtide is found the way users get it (the path recorded at
install time, or TIDE_LIBRARY)."""
import os

import pytest

import tide


@pytest.fixture(scope="session")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("tide-py")


@pytest.fixture(scope="session")
def config(workdir):
    path = workdir / "tiny.ini"
    path.write_text(
        "[model]\npath = %s\ncreate = tiny\ncreate_seed = 11\n"
        "[backend]\ndevice = backend-cpu-onednn\n"
        "[generation]\ngen_length = 64\n"
        "[output]\nprogress = false\nstream = false\n" % (workdir / "tiny"))
    return str(path)


@pytest.fixture(scope="session")
def engine(config):
    eng = tide.Engine(config, log_level="warn")
    yield eng
    eng.close()


# A 40-token prompt of ids the tiny tokenizer knows.
PROMPT_IDS = [7 + (i * 37) % 400 for i in range(40)]


@pytest.fixture
def prompt_ids():
    return list(PROMPT_IDS)
