"""Conversations for chat templates, and their rendering by Jinja2.

  chat_templates.py cases BOS EOS OUT   writes one JSON object of template
                                        variables per line: many conversations
                                        (system, multi-turn, tools, assistant
                                        tool calls, tool results, text that
                                        stresses escaping), each with
                                        add_generation_prompt true and false
  chat_templates.py render TEMPLATE CASES
                                        renders each case with Jinja2 set up as
                                        Hugging Face's apply_chat_template sets
                                        it up; prints {"text"} or {"error"} per line
  chat_templates.py snippets OUT        writes small templates, one feature each
                                        (whitespace control, every filter, test
                                        and method the interpreter has), as
                                        {"template", "vars"} lines
  chat_templates.py render-snippets SNIPPETS
                                        renders them with Jinja2, as render does

The Jinja2 environment follows transformers' documented behaviour: a sandbox
whose lists and dicts are immutable, trim_blocks and lstrip_blocks, the
loop-controls extension, tojson as json.dumps (key order and non-ASCII kept),
and the raise_exception and strftime_now globals. strftime_now reads a fixed
clock (2025-01-15 08:30:00) so that both sides print the same date.
"""
import datetime
import json
import sys

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Zürich"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web.\nReturns the top results.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "default": 3}},
            "required": ["query"],
        },
    },
}


def call(id_, name, arguments):
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": arguments}}


def conversations():
    sys_ = {"role": "system", "content": "You are a helpful assistant."}
    user = {"role": "user", "content": "Hello! How are you?"}
    reply = {"role": "assistant", "content": "I'm fine, thanks. And you?"}
    user2 = {"role": "user", "content": "What's 2 + 2?"}
    ask_weather = {"role": "user", "content": "What is the weather in Paris and in Zürich?"}
    one_call = {"role": "assistant", "content": "",
                "tool_calls": [call("abc123def", "get_weather", {"city": "Paris", "unit": "celsius"})]}
    two_calls = {"role": "assistant", "content": None,
                 "tool_calls": [call("abc123def", "get_weather", {"city": "Paris"}),
                                call("xyz789ghi", "get_weather", {"city": "Zürich", "unit": "celsius"})]}
    result1 = {"role": "tool", "tool_call_id": "abc123def", "name": "get_weather",
               "content": "{\"temperature\": 21.5, \"sky\": \"clear\"}"}
    result2 = {"role": "tool", "tool_call_id": "xyz789ghi", "name": "get_weather",
               "content": "{\"temperature\": 12, \"sky\": \"rain\"}"}
    final = {"role": "assistant", "content": "Paris is 21.5 °C and clear; Zürich 12 °C with rain."}
    tricky = {"role": "user", "content": "  quotes ' \" and {{ braces }} {% tags %}\n\nnew\tlines, "
                                         "emoji 🙂 CJK 日本語, trailing space  "}
    yield {"messages": [user]}
    yield {"messages": [sys_, user]}
    yield {"messages": [sys_, user, reply, user2]}
    yield {"messages": [user, reply, user2]}
    yield {"messages": [user, reply]}
    yield {"messages": [sys_, tricky]}
    yield {"messages": [{"role": "user", "content": ""}]}
    yield {"messages": [sys_, ask_weather], "tools": [WEATHER, SEARCH]}
    yield {"messages": [ask_weather], "tools": [WEATHER]}
    yield {"messages": [ask_weather, one_call, result1, final], "tools": [WEATHER]}
    yield {"messages": [sys_, ask_weather, one_call, result1], "tools": [WEATHER, SEARCH]}
    yield {"messages": [ask_weather, two_calls, result1, result2, final], "tools": [WEATHER]}
    yield {"messages": [sys_, user, reply, ask_weather, one_call, result1, final, user2],
           "tools": [WEATHER, SEARCH]}
    yield {"messages": [sys_, user], "tools": []}


def write_cases(bos, eos, out):
    with open(out, "w") as f:
        for conversation in conversations():
            for generation_prompt in (True, False):
                case = dict(conversation)
                case["add_generation_prompt"] = generation_prompt
                if bos != "-":
                    case["bos_token"] = bos
                if eos != "-":
                    case["eos_token"] = eos
                f.write(json.dumps(case, ensure_ascii=False) + "\n")


def environment():
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from jinja2.exceptions import TemplateError

    def raise_exception(message):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    class Generation(Extension):
        """{% generation %}: outputs its body; a call block, as in transformers."""
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    def strftime_now(format):
        return datetime.datetime(2025, 1, 15, 8, 30, 0).strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols, Generation])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(template_path, cases_path):
    with open(template_path, encoding="utf-8") as f:
        template = environment().from_string(f.read())
    with open(cases_path, encoding="utf-8") as f:
        for line in f:
            try:
                out = {"text": template.render(**json.loads(line))}
            except Exception as e:  # the template's own raise_exception, or a type error
                out = {"error": str(e)}
            print(json.dumps(out, ensure_ascii=False))


SNIPPETS = [
    # Whitespace: trim_blocks, lstrip_blocks, "-" and "+", comments, raw, newlines.
    ("a\n  {% if true %}\n  b\n  {% endif %}\nc\n", {}),
    ("a  {%- if true -%}  b  {%- endif -%}  c", {}),
    ("x\n    {%+ if true %}y{% endif +%}\nz", {}),
    ("{# note #}\n  {#- trimmed -#}  text\n   {# c #}  after", {}),
    ("{% raw %}{{ not parsed }} {% if %}{% endraw %}!", {}),
    ("line1\r\nline2\rline3\n\n", {}),
    ("{{ 'a' }}\n{{ 'b' -}}\n  c {{- ' d' }}", {}),
    ("  {% for i in [1, 2] %}\n  [{{ i }}]\n  {% endfor %}\n", {}),
    ("{%- set x = 1 %}\n\n{{ x }}", {}),
    # Values as Python prints them.
    ("{{ none }} {{ true }} {{ 1.0 }} {{ 2.5e-7 }} {{ 1e16 }} {{ 12345678901234567.0 }} {{ 0.1 + 0.2 }}", {}),
    ("{{ [1, 'a', none, true, 1.5] }} {{ {'k': 'v', 'n': [1]} }} {{ \"it's\" }} {{ ['it\\'s', \"q\\\"\"] }}", {}),
    ("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 3 * 'ab' }}", {}),
    ("{{ 'a' ~ 1 ~ none ~ undefined_name }} {{ x }}|{{ x.y is defined }}", {"x": {"z": 1}}),
    ("{{ '\\u00e9\\x41\\n\\t\\\\' }} {{ 'é' }}", {}),
    ("{{ 1 < 2 < 3 }} {{ 1 == 1.0 }} {{ 'a' in 'cat' }} {{ 2 not in [1, 3] }} {{ 'k' in {'k': 1} }}", {}),
    ("{{ 'yes' if x else 'no' }} {{ 'only' if false }}|{{ x and 'a' or 'b' }} {{ not x }}", {"x": 0}),
    # Variables and scopes.
    ("{% set x = 0 %}{% for i in range(3) %}{% set x = x + i %}{{ x }}{% endfor %}|{{ x }}", {}),
    ("{% set ns = namespace(total=0, items=[]) %}{% for i in range(4) %}{% set ns.total = ns.total + i %}"
     "{% set ns.items = ns.items + [i] %}{% endfor %}{{ ns.total }} {{ ns.items }}", {}),
    ("{% set a, b = [1, 2] %}{{ a }}{{ b }}{% set t %}  block {{ a }}  {% endset %}[{{ t }}]", {}),
    ("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
     "{{ greet('A') }} {{ greet('B', '?') }} {{ greet(name='C', punct='.') }}", {}),
    ("{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * (fact(n - 1) | int) }}{% endif %}{% endmacro %}{{ fact(6) }}", {}),
    ("{% set x = 'top' %}{% macro m() %}{{ x }}{% endmacro %}{% set x = 'later' %}{{ m() }}", {}),
    # Loops.
    ("{% for x in xs %}{{ loop.index }}/{{ loop.length }}:{{ x }}{{ ',' if not loop.last }}{% endfor %}",
     {"xs": ["a", "b", "c"]}),
    ("{% for x in xs %}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}"
     "{{ loop.previtem }}{{ loop.nextitem }}{{ loop.cycle('o', 'e') }} {% endfor %}", {"xs": [1, 2, 3]}),
    ("{% for x in xs if x % 2 %}{{ x }}{{ loop.length }}{% else %}none{% endfor %}", {"xs": [1, 2, 3, 5]}),
    ("{% for x in [] %}{{ x }}{% else %}empty{% endfor %}{% for x in missing %}{% endfor %}", {}),
    ("{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i > 4 %}{% break %}{% endif %}{{ i }}{% endfor %}", {}),
    ("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}",
     {"d": {"b": 1, "a": [2], "c": None}}),
    ("{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %} {% for c in 'héllo' %}{{ c }}.{% endfor %}", {}),
    ("{{ range(5) | list }} {{ range(2, 9, 3) | list }} {{ range(5, 0, -2) | list }} {{ (1, 'a') }} {{ (1,) }}", {}),
    # Filters.
    ("{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ d | tojson(sort_keys=true) }}|{{ [] | tojson(indent=4) }}",
     {"d": {"z": "ü\"\\\n", "a": [1, 2.5, None, True, {}], "e": 1e-7}}),
    ("{{ '  x \\u00a0' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ s | length }} {{ [1, 2] | count }} {{ {} | length }}",
     {"s": "日本語"}),
    ("{{ missing | default('d') }} {{ '' | default('e', true) }} {{ none | default('n') }} {{ 0 | d(5, boolean=true) }}", {}),
    ("{{ xs | join(', ') }} {{ xs | join }} {{ ds | join('-', attribute='n') }}",
     {"xs": ["a", 1, None], "ds": [{"n": "x"}, {"n": "y"}]}),
    ("{{ ds | selectattr('t', 'equalto', 'f') | map(attribute='n') | list }} {{ ds | rejectattr('t') | list | length }}"
     " {{ ds | selectattr('t') | first }} {{ ds | map(attribute='n') | join }}",
     {"ds": [{"n": "a", "t": "f"}, {"n": "b", "t": ""}, {"n": "c", "t": "f"}]}),
    ("{{ [3, 1, 2] | sort }} {{ ['b', 'A', 'c'] | sort }} {{ ds | sort(attribute='k', reverse=true) | map(attribute='k') | list }}",
     {"ds": [{"k": 2}, {"k": 9}, {"k": 1}]}),
    ("{{ xs | first }} {{ xs | last }} {{ xs | reverse | list }} {{ 'abc' | reverse }} {{ xs | unique | list }}"
     " {{ xs | sum }} {{ xs | min }} {{ xs | max }}", {"xs": [3, 1, 3, 2]}),
    ("{{ 'hello world' | upper }} {{ 'HeLLo' | lower }} {{ 'hello WORLD' | capitalize }} {{ 'hello world-x' | title }}"
     " {{ 'aaa' | replace('a', 'b', 2) }} {{ 3 | string }} {{ '<a&b>' | e }} {{ 'one two  three' | wordcount }}", {}),
    ("{{ '42' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ 3.9 | int }} {{ '2.5' | float }} {{ 2 | float }}"
     " {{ -3 | abs }} {{ 2.5 | round }} {{ 3.14159 | round(2) }} {{ 2.1 | round(0, 'ceil') }}", {}),
    ("{{ d | items | list }} {{ d | dictsort }}", {"d": {"b": 1, "a": 2}}),
    ("{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(width=1, blank=true) }}", {}),
    ("{{ [1, 2, 3] | map('string') | join('+') }} {{ ['a', ' b '] | map('trim') | list }} {{ xs | select('odd') | list }}",
     {"xs": [1, 2, 3]}),
    # Tests.
    ("{{ x is defined }} {{ y is undefined }} {{ none is none }} {{ 's' is string }} {{ 1 is number }}"
     " {{ 1 is integer }} {{ 1.0 is float }} {{ true is boolean }} {{ {} is mapping }} {{ [] is iterable }}"
     " {{ 's' is sequence }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 2 is in [1, 2] }}"
     " {{ 'a' is eq 'a' }} {{ 1 is ne 2 }} {{ 'ab' is lower }} {{ 'AB' is upper }} {{ x is not none }}", {"x": 1}),
    # Methods.
    ("{{ '  a b  '.strip() }}|{{ 'xax'.strip('x') }}|{{ '  a'.lstrip() }}|{{ 'a  '.rstrip() }}|"
     "{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }}", {}),
    ("{{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'c')) }} {{ 'abc'.upper() }} {{ 'ABC'.lower() }}"
     " {{ 'a-b'.replace('-', '+') }} {{ 'hello'.find('l') }} {{ 'hello'.rfind('l') }} {{ 'hello'.count('l') }}"
     " {{ '-'.join(['a', 'b']) }} {{ 'a\\nb\\n'.splitlines() }} {{ 'hi there'.title() }}", {}),
    ("{{ d.get('a') }} {{ d.get('x') }} {{ d.get('x', 5) }} {{ d.keys() | list }} {{ d.values() | list }} {{ d['a'] }} {{ d.a }}",
     {"d": {"a": 1, "b": 2}}),
    ("{{ s[0] }}{{ s[-1] }}{{ s[1:3] }}{{ s[::-1] }}{{ s[:-1] }} {{ xs[1:] }} {{ xs[::2] }} {{ xs[-2:] }} {{ xs[5] }}|{{ xs.0 }}",
     {"s": "héllo", "xs": [1, 2, 3, 4]}),
    # Errors both sides report.
    ("{{ raise_exception('stop here') }}", {}),
    ("{{ missing.attribute }}", {}),
    ("{{ 'a' + 1 }}", {}),
    ("{{ strftime_now('%Y-%m-%d %H:%M %b %A') }}", {}),
]


def write_snippets(out):
    with open(out, "w") as f:
        for template, variables in SNIPPETS:
            f.write(json.dumps({"template": template, "vars": variables}, ensure_ascii=False) + "\n")


def render_snippets(path):
    env = environment()
    with open(path, encoding="utf-8") as f:
        for line in f:
            case = json.loads(line)
            try:
                out = {"text": env.from_string(case["template"]).render(**case["vars"])}
            except Exception as e:
                out = {"error": str(e)}
            print(json.dumps(out, ensure_ascii=False))


if __name__ == "__main__":
    if sys.argv[1] == "cases":
        write_cases(sys.argv[2], sys.argv[3], sys.argv[4])
    elif sys.argv[1] == "snippets":
        write_snippets(sys.argv[2])
    elif sys.argv[1] == "render-snippets":
        render_snippets(sys.argv[2])
    else:
        render(sys.argv[2], sys.argv[3])
