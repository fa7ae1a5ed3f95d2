"""Chat-template fixtures for nuvec-lm, rendered by transformers' own Jinja environment.

Writes crates/nuvec-lm/tests/fixtures/templates.json:
  templates  each case: a template, the messages, add_generation_prompt, the special tokens,
             and what transformers' apply_chat_template(..., tokenize=False) renders;
  strftime   each case: a format, seconds since the epoch, and Python's strftime of that
             UTC time (transformers' strftime_now formats the current time the same way).

Run with the MLX venv (transformers comes with mlx-lm):
  .venv-mlx/bin/python scripts/golden/make_template_fixtures.py
"""

import json
import pathlib
from datetime import datetime, timezone

from transformers.utils.chat_template_utils import _compile_jinja_template

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "crates/nuvec-lm/tests/fixtures/templates.json"

MESSAGES = [
    {"role": "system", "content": "Be brief.\nQuote \"exactly\" \\ and <tags> & 'apostrophes'."},
    {"role": "user", "content": "Grüße, 日本語, emoji 🦀, tab\there, bell\u0007, nul-ish \u001f."},
    {"role": "assistant", "content": ""},
]

TEMPLATES = [
    # A message as JSON: Python's separators, raw non-ASCII, no HTML escaping.
    "{% for m in messages %}{{ m | tojson }}\n{% endfor %}",
    "{{ messages | tojson(indent=2) }}",
    "{{ messages[1] | tojson(ensure_ascii=true) }}",
    "{{ messages[0] | tojson(sort_keys=true, separators=(',', ':')) }}",
    "{{ messages | tojson(indent=0) }}|{{ [] | tojson(indent=2) }}|{{ {} | tojson }}",
    # Numbers as Python writes them, nested containers, null and booleans.
    "{{ {'b': 1, 'a': [2.0, 0.1, 0.00001, 123456789012345678.0, -0.0, 1.5e300, none, true, false],"
    " 'c': {'z': 'x', 'y': []}} | tojson }}",
    "{{ {'b': 1, 'a': {'d': 1, 'c': 2}} | tojson(indent=4, sort_keys=true) }}",
    # A ChatML-style template with tojson inside, as tool-calling templates write it.
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content | tojson }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
]

STRFTIME = [
    ("%d %b %Y", 0),
    ("%d %b %Y", 1722000000),
    ("%Y-%m-%d %H:%M:%S %A %a %B %j %y %I %p %e %F %T %%", 951782400),  # 2000-02-29
    ("%A %d %B %Y, %I:%M %p", 1790000000),
    ("%j %a %b", 4102444799),  # 2099-12-31 23:59:59
    ("%Y %m %d", -86400),  # 1969-12-31
]


def main():
    cases = []
    for template in TEMPLATES:
        for add_generation_prompt in (False, True):
            compiled = _compile_jinja_template(template)
            rendered = compiled.render(
                messages=MESSAGES,
                add_generation_prompt=add_generation_prompt,
                bos_token="<s>",
                eos_token="</s>",
            )
            cases.append(
                {
                    "template": template,
                    "messages": MESSAGES,
                    "add_generation_prompt": add_generation_prompt,
                    "rendered": rendered,
                }
            )
    strftime = [
        {
            "format": fmt,
            "seconds": seconds,
            "expected": datetime.fromtimestamp(seconds, timezone.utc).strftime(fmt),
        }
        for fmt, seconds in STRFTIME
    ]
    OUT.write_text(
        json.dumps({"templates": cases, "strftime": strftime}, indent=1, ensure_ascii=False) + "\n",
        encoding="utf-8",
    )
    print(f"wrote {OUT}: {len(cases)} templates, {len(strftime)} strftime cases")


if __name__ == "__main__":
    main()
