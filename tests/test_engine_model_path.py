"""What SGLang decides from the model path, by SGLang's own code (issue #31 Why 7; marker
``engine``): its ``get_config`` (utils/hf_transformers/config.py, the call the draft's
ModelConfig makes with the default ``--model-config-parser auto``) on the same drafter under
several folder names, against the replay (mappings/engines/sglang.toml [[model_path]]):
``python -m pytest -m engine tests/test_engine_model_path.py``."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from conftest import PRODUCERS
from helpers.engine import side_env, side_python

from weightcheck.engines.view import view
from weightcheck.model.drafter import load_drafter

pytestmark = pytest.mark.engine

NAMES = [
    "kimi-k2-eagle3",  # neither word pair: read as config.json says
    "mistral-7b-eagle3",  # both words: the Mistral native-format parser
    "Mistral-Small-EAGLE3-draft",  # the test lower-cases
    "EAGLE-for-mistral",
    "mistral-drafter",  # one word only
    "leanstral-draft",  # a model name the parser knows
]

PROBE = """
import json, sys, warnings, logging
warnings.filterwarnings("ignore"); logging.disable(logging.WARNING)
from sglang.srt.utils.hf_transformers.config import get_config
out = {}
for path in json.loads(sys.argv[1]):
    try:
        get_config(path, trust_remote_code=False)
        out[path] = None
    except Exception as e:
        out[path] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
"""


def test_sglang_reads_the_path_as_the_replay_says(tmp_path):
    py = side_python("sglang")
    paths = []
    for n in NAMES:
        shutil.copytree(PRODUCERS / "specforge-sglang", tmp_path / n)
        paths.append(str(tmp_path / n))
    p = subprocess.run(
        [py, "-c", PROBE, json.dumps(paths)],
        capture_output=True,
        text=True,
        timeout=600,
        env=side_env(),
    )
    assert p.returncode == 0, p.stderr[-2000:]
    engine = json.loads(p.stdout.strip().splitlines()[-1])
    for path in paths:
        v = view(load_drafter(path), "sglang")
        replay_stops = v.failure is not None and v.failure.subject == "model path"
        assert replay_stops == (engine[path] is not None), (path, engine[path], v.failure)
        if engine[path] is not None:
            assert "params.json" in engine[path]
    assert sum(e is not None for e in engine.values()) == 4  # both words, or a known name
