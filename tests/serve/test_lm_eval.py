"""lm-evaluation-harness against `tide serve`, end to end, offline.

A tiny generate-until task (6 question/answer pairs, a local JSON Lines
file, until "\\n\\n", greedy) is written to a temporary folder and run
through lm_eval's `local-completions` model twice:
  - tokenizer_backend=none: text prompts;
  - the default (auto): lm_eval finds /tokenizer_info and /tokenize and sends
    token-id prompts (its remote tokenizer, as with vLLM).
Both runs must complete, log every sample, and get the same answers (the
same ids reach the engine); the server must have served each request.
Accuracy means nothing with random weights: the pipeline is the point.

Run by venv_run.sh with the venv's Python (HF_*_OFFLINE set; environment:
TIDE_BIN, TIDE_SOURCE_DIR).
"""
import glob
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Server, check, finish  # noqa: E402

DOCS = [
    {"question": "Q: What is 2+2?\nA:", "answer": "4"},
    {"question": "Q: Name a colour.\nA:", "answer": "red"},
    {"question": "Q: What is the capital of France?\nA:", "answer": "Paris"},
    {"question": "Q: What is the opposite of up?\nA:", "answer": "down"},
    {"question": "Q: How many legs has a spider?\nA:", "answer": "8"},
    {"question": "Q: def add(a, b):\n", "answer": "    return a + b"},
]

TASK = """task: tide_tiny_gen
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "{{{{question}}}}"
doc_to_target: "{{{{answer}}}}"
generation_kwargs:
  until: ["\\n\\n"]
  max_gen_toks: 24
  do_sample: false
  temperature: 0
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""


def run_lm_eval(srv, tmp, name, model_args):
    out = os.path.join(tmp, "out-" + name)
    cmd = [sys.executable, "-m", "lm_eval", "--model", "local-completions",
           "--model_args", "base_url=%s/v1/completions,model=tiny,max_retries=1,%s"
           % (srv.base, model_args),
           "--tasks", "tide_tiny_gen", "--include_path", os.path.join(tmp, "task"),
           "--output_path", out, "--log_samples"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp)
    print("lm_eval (%s) exited %d" % (name, r.returncode))
    if r.returncode != 0:
        print(r.stdout[-4000:])
        print(r.stderr[-4000:])
        return None
    results = glob.glob(os.path.join(out, "**", "results_*.json"), recursive=True)
    samples = glob.glob(os.path.join(out, "**", "samples_tide_tiny_gen_*.jsonl"), recursive=True)
    if not results or not samples:
        print("lm_eval (%s) wrote no results or samples under %s" % (name, out))
        return None
    with open(results[0]) as f:
        res = json.load(f)
    with open(samples[0]) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return res, sorted(rows, key=lambda x: x["doc_id"])


def main():
    failures = []
    tmp = tempfile.mkdtemp(prefix="tide-lm-eval-")
    os.makedirs(os.path.join(tmp, "task"))
    data = os.path.join(tmp, "task", "data.jsonl")
    with open(data, "w") as f:
        for d in DOCS:
            f.write(json.dumps(d) + "\n")
    with open(os.path.join(tmp, "task", "tide_tiny_gen.yaml"), "w") as f:
        f.write(TASK.format(data=data))
    srv = Server(sets=["generation.steps=8"], tmp=os.path.join(tmp, "srv"))
    try:
        runs = {}
        for name, args in [("text", "tokenizer_backend=none,num_concurrent=1"),
                           ("remote-tokenizer", "num_concurrent=2")]:
            before = srv.metrics().get("tide_generations_total", 0)
            got = run_lm_eval(srv, tmp, name, args)
            check(got is not None, "lm_eval (%s) did not complete" % name, failures)
            if got is None:
                continue
            res, rows = got
            served = srv.metrics().get("tide_generations_total", 0) - before
            check("tide_tiny_gen" in res.get("results", {}),
                  "%s: results lack the task: %r" % (name, res.get("results")), failures)
            check(len(rows) == len(DOCS), "%s: %d samples logged" % (name, len(rows)), failures)
            check(served == len(DOCS), "%s: the server served %d generations" % (name, served),
                  failures)
            answers = [r["resps"][0][0] for r in rows]
            check(all(isinstance(a, str) and "\n\n" not in a for a in answers),
                  "%s: answers %r" % (name, answers), failures)
            runs[name] = answers
            print("%s: exact_match %s; answers %r" % (
                name, res["results"]["tide_tiny_gen"].get("exact_match,none"), answers))
        if len(runs) == 2:
            check(runs["text"] == runs["remote-tokenizer"],
                  "text and token-id prompts gave different answers", failures)
        st, out = srv.get("/metrics")
        check(b'tide_http_requests_total{endpoint="tokenize",status="200"}' in out,
              "the remote tokenizer run did not use /tokenize", failures)
    finally:
        failures += srv.stop()
    finish(failures)


if __name__ == "__main__":
    main()
