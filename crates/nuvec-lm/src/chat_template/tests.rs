//! Templates rendered against `transformers`' own Jinja environment
//! (`scripts/golden/make_template_fixtures.py` writes the fixture).

use super::*;
use crate::tokenizer::Message;
use serde_json::Value as Json;

fn fixture() -> Json {
    serde_json::from_str(include_str!("../../tests/fixtures/templates.json"))
        .expect("the template fixture is JSON")
}

#[test]
fn templates_render_as_transformers_renders_them() {
    let fixture = fixture();
    let cases = fixture["templates"].as_array().expect("template cases");
    assert!(cases.len() >= 16);
    for case in cases {
        let messages: Vec<Message> = case["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .map(|m| Message::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
            .collect();
        let context = vec![
            ("messages", Value::from_serialize(&messages)),
            (
                "add_generation_prompt",
                Value::from(case["add_generation_prompt"].as_bool().unwrap()),
            ),
            ("bos_token", Value::from("<s>")),
            ("eos_token", Value::from("</s>")),
        ];
        let template = case["template"].as_str().unwrap();
        let rendered = render(template, context).unwrap();
        assert_eq!(rendered, case["rendered"].as_str().unwrap(), "{template}");
    }
}

#[test]
fn strftime_formats_as_python_does_in_utc() {
    let fixture = fixture();
    for case in fixture["strftime"].as_array().expect("strftime cases") {
        let format = case["format"].as_str().unwrap();
        let seconds = case["seconds"].as_i64().unwrap();
        assert_eq!(
            strftime(format, seconds).unwrap(),
            case["expected"].as_str().unwrap(),
            "{format} at {seconds}"
        );
    }
}

#[test]
fn strftime_now_is_callable_from_a_template_and_refuses_unknown_directives() {
    let year = render("{{ strftime_now('%Y') }}", Vec::new()).unwrap();
    assert!(
        year.len() == 4 && year.parse::<i32>().unwrap() >= 2024,
        "{year}"
    );
    let error = render("{{ strftime_now('%Q') }}", Vec::new())
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("%Q") && error.contains("not supported"),
        "{error}"
    );
}

#[test]
fn tojson_refuses_what_json_dumps_refuses() {
    for (template, expected) in [
        ("{{ missing | tojson }}", "not JSON serializable"),
        ("{{ [1] | tojson(separators=1) }}", "separators"),
        ("{{ [1] | tojson(false, 2, none, false, 5) }}", "at most 4"),
        ("{{ [1] | tojson(false, indent=2) }}", ""),
    ] {
        let outcome = render(template, Vec::new());
        if expected.is_empty() {
            assert_eq!(outcome.unwrap(), "[\n  1\n]");
        } else {
            let error = outcome.unwrap_err().to_string();
            assert!(error.contains(expected), "{template}: {error}");
        }
    }
}
