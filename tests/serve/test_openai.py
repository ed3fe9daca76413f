"""`tide serve` driven by the official `openai` Python client (loopback, tiny
synthetic model, an API key): completions, chat (a system message and
several turns in the model's template), streaming (with usage), stop
sequences (and the usage of what they leave), batches, token-id prompts,
the tide object, models, and errors surfacing as the client's exceptions
with the field named (an unknown model: 404).

Run by venv_run.sh with the venv's Python (environment: TIDE_BIN,
TIDE_SOURCE_DIR).
"""
import json
import os
import sys

import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Server, check, finish  # noqa: E402

KEY = "test-key-15"
AUTH = {"Authorization": "Bearer " + KEY}


def tokens(srv, body):
    """The token count /tokenize gives for body."""
    st, out = srv.post("/tokenize", body, headers=AUTH)
    return json.loads(out)["count"] if st == 200 else "status %d: %r" % (st, out)


def main():
    failures = []
    srv = Server(sets=["serve.api_key=" + KEY])
    try:
        c = openai.OpenAI(base_url=srv.base + "/v1", api_key=KEY, max_retries=0, timeout=300)
        models = c.models.list()
        ids = [m.id for m in models.data]
        check(ids == ["tiny"], "models.list: %r" % ids, failures)
        model = ids[0]
        check(c.models.retrieve(model).id == model, "models.retrieve", failures)

        # Completions: deterministic (greedy), usage and the tide object.
        kw = dict(model=model, prompt="The tide comes in", max_tokens=40, temperature=0,
                  extra_body={"steps": 4})
        r1 = c.completions.create(**kw)
        r2 = c.completions.create(**kw)
        t = r1.choices[0].text
        check(isinstance(t, str) and t == r2.choices[0].text, "greedy completions repeat",
              failures)
        check(r1.choices[0].finish_reason in ("length", "stop"),
              "finish_reason %r" % r1.choices[0].finish_reason, failures)
        u = r1.usage
        check(u.completion_tokens <= 40 and u.prompt_tokens > 0 and
              u.total_tokens == u.prompt_tokens + u.completion_tokens, "usage %r" % u, failures)
        tide = (r1.model_extra or {}).get("tide") or {}
        for k in ("steps", "forwards", "hit_rate", "promotions", "gb_moved", "seconds"):
            check(k in tide, "the tide object lacks %s: %r" % (k, tide), failures)
        # A block ends early once no mask is left, so at most 4 steps per block.
        check(tide.get("steps") and tide.get("blocks") and
              tide["blocks"] <= tide["steps"] <= 4 * tide["blocks"],
              "steps <= 4 per block: %r" % tide, failures)
        check(r1.id.startswith("cmpl-") and r1.object == "text_completion", "id/object",
              failures)

        # The same request streamed: one chunk per block, then the finish;
        # the text is the same.
        chunks = list(c.completions.create(stream=True, stream_options={"include_usage": True},
                                           **kw))
        text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
        check(text == t, "streamed text %r != %r" % (text, t), failures)
        blocks = tide.get("blocks", 0)
        with_choices = [ch for ch in chunks if ch.choices]
        check(len(with_choices) == blocks + 1,
              "%d chunks with choices for %d blocks" % (len(with_choices), blocks), failures)
        check(with_choices[-1].choices[0].finish_reason == r1.choices[0].finish_reason,
              "streamed finish_reason", failures)
        check(chunks[-1].usage and chunks[-1].usage.completion_tokens == u.completion_tokens,
              "streamed usage %r" % chunks[-1].usage, failures)

        # Stop: a two-character sequence first seen at k cuts the text there.
        k = next((i for i in range(2, len(t) - 2) if t.find(t[i:i + 2]) == i
                  and t[i:i + 2].strip()), None)
        if k is None:
            check(False, "no stop sequence to test in %r" % t, failures)
        else:
            stop = t[k:k + 2]
            rs = c.completions.create(stop=[stop], **kw)
            check(rs.choices[0].text == t[:k] and rs.choices[0].finish_reason == "stop",
                  "stop %r: %r (want %r)" % (stop, rs.choices[0].text, t[:k]), failures)
            streamed = "".join(ch.choices[0].text
                               for ch in c.completions.create(stop=stop, stream=True, **kw)
                               if ch.choices)
            check(streamed == t[:k], "streamed stop %r: %r" % (stop, streamed), failures)
            # usage counts the tokens of the text returned, not the ones the
            # stop sequence cut off; streamed, the same.
            n = rs.usage.completion_tokens
            check(0 < n < u.completion_tokens,
                  "stop %r: %d completion tokens for %r (%d without the stop)"
                  % (stop, n, rs.choices[0].text, u.completion_tokens), failures)
            last = list(c.completions.create(stop=stop, stream=True,
                                              stream_options={"include_usage": True}, **kw))[-1]
            check(last.usage and last.usage.completion_tokens == n,
                  "streamed stop usage %r, want %d" % (last.usage, n), failures)
        r0 = c.completions.create(stop=[t[:1]], **kw)
        check(r0.choices[0].text == "" and r0.usage.completion_tokens == 0,
              "a stop at the start: %r, %r" % (r0.choices[0].text, r0.usage), failures)

        # A batch of two prompts, and a prompt of token ids.
        rb = c.completions.create(model=model, prompt=["The tide comes in", "Hello"],
                                  max_tokens=40, temperature=0, extra_body={"steps": 4})
        check([ch.index for ch in rb.choices] == [0, 1] and rb.choices[0].text == t,
              "batch: %r" % rb.choices, failures)
        st, out = srv.post("/tokenize", {"prompt": "The tide comes in"}, headers=AUTH)
        toks = json.loads(out)["tokens"]
        ri = c.completions.create(model=model, prompt=toks, max_tokens=40, temperature=0,
                                  extra_body={"steps": 4})
        check(ri.choices[0].text == t, "token-id prompt: %r" % ri.choices[0].text, failures)

        # Chat, whole and streamed.
        msgs = [{"role": "user", "content": "Say something about tides"}]
        rc = c.chat.completions.create(model=model, messages=msgs, max_tokens=24,
                                       temperature=0)
        m = rc.choices[0].message
        check(m.role == "assistant" and isinstance(m.content, str), "chat: %r" % m, failures)
        check(rc.id.startswith("chatcmpl-") and rc.object == "chat.completion", "chat id/object",
              failures)
        sc = list(c.chat.completions.create(model=model, messages=msgs, max_tokens=24,
                                            temperature=0, stream=True))
        check(sc[0].choices[0].delta.role == "assistant", "first chat chunk names the role",
              failures)
        st_text = "".join(ch.choices[0].delta.content or "" for ch in sc if ch.choices)
        check(st_text == m.content, "streamed chat %r != %r" % (st_text, m.content), failures)

        # The prompt is LLaDA2.0's official chat template, with roles: one
        # user message after the default system one, or a system message and
        # several turns (/tokenize of the text they stand for; of the
        # messages themselves, the same).
        one = ("<role>SYSTEM</role>detailed thinking off<|role_end|><role>HUMAN</role>"
               "Say something about tides<|role_end|><role>ASSISTANT</role>")
        check(rc.usage.prompt_tokens == tokens(srv, {"prompt": one}),
              "chat prompt: %d tokens, not those of %r" % (rc.usage.prompt_tokens, one), failures)
        turns = [{"role": "system", "content": "Be brief."},
                 {"role": "user", "content": "Hi"},
                 {"role": "assistant", "content": "Hello!"},
                 {"role": "user", "content": "And you?"}]
        rt = c.chat.completions.create(model=model, messages=turns, max_tokens=8, temperature=0)
        many = ("<role>SYSTEM</role>Be brief.<|role_end|><role>HUMAN</role>Hi<|role_end|>"
                "<role>ASSISTANT</role>Hello!<|role_end|><role>HUMAN</role>And you?<|role_end|>"
                "<role>ASSISTANT</role>")
        want = tokens(srv, {"prompt": many})
        check(rt.choices[0].message.role == "assistant" and rt.usage.prompt_tokens == want,
              "chat with turns: %r, prompt_tokens %d, want %r"
              % (rt.choices[0].message, rt.usage.prompt_tokens, want), failures)
        check(tokens(srv, {"messages": turns}) == want, "/tokenize of the messages", failures)

        # Errors reach the client as exceptions naming the field.
        for bad, field in [(dict(max_tokens=100000), "max_tokens"),
                           (dict(max_tokens=4, temperature=-1), "temperature"),
                           (dict(max_tokens=4, extra_body={"block_length": 8}), "block_length"),
                           (dict(max_tokens=4, logprobs=2), "logprobs")]:
            try:
                c.completions.create(model=model, prompt="x", **bad)
                check(False, "%r was accepted" % bad, failures)
            except openai.BadRequestError as e:
                param = (e.body or {}).get("param") if isinstance(e.body, dict) else None
                check(param == field, "%r: param %r, want %r (%s)" % (bad, param, field, e),
                      failures)
        # A model not served: 404 model_not_found, as GET /v1/models/NAME.
        try:
            c.completions.create(model="gpt-4", prompt="x", max_tokens=4)
            check(False, "model gpt-4 was accepted", failures)
        except openai.NotFoundError as e:
            code = (e.body or {}).get("code") if isinstance(e.body, dict) else None
            check(code == "model_not_found" and "'gpt-4'" in str(e) and "'tiny'" in str(e),
                  "model gpt-4: %r (%s)" % (code, e), failures)
        try:
            c.models.retrieve("gpt-4")
            check(False, "models.retrieve('gpt-4') found it", failures)
        except openai.NotFoundError:
            pass
        try:
            c.completions.create(model=model, prompt="", max_tokens=4)
            check(False, "an empty prompt was accepted", failures)
        except openai.BadRequestError as e:
            check("empty" in str(e), "empty prompt: %s" % e, failures)
        try:
            openai.OpenAI(base_url=srv.base + "/v1", api_key="wrong",
                          max_retries=0).models.list()
            check(False, "a wrong key was accepted", failures)
        except openai.AuthenticationError:
            pass
    finally:
        failures += srv.stop()
    finish(failures)


if __name__ == "__main__":
    main()
