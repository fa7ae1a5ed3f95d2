//! `nuvec serve` on one process: answers equal `nuvec generate`'s for the same seed, whole
//! and streamed; concurrent clients decoded in one batch each get their own answer; every
//! hostile input gets its status while other clients' streams finish.

mod serve_support;

use serde_json::{json, Value};
use serve_support::{chat, fixture, generate, streamed_text, Server};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

const MODEL: &str = "qwen3-f32";
/// The fixture's end tokens (config and generation_config), biased away so generations run to
/// their limit.
fn no_end() -> Value {
    json!({"393": -100, "395": -100})
}

#[test]
fn answers_equal_nuvec_generate_for_the_same_seed_whole_and_streamed() {
    let server = Server::start(MODEL, 1, &[], &[]);
    for (prompt, temp, seed) in [("hello there", "0.0", "1"), ("tell me a story", "0.9", "7")] {
        let args = [
            "--prompt",
            prompt,
            "--max-tokens",
            "16",
            "--temp",
            temp,
            "--seed",
            seed,
        ];
        let expected = generate(MODEL, &args);
        let extra = json!({"max_tokens": 16, "temperature": temp.parse::<f64>().unwrap(),
                           "seed": seed.parse::<u64>().unwrap()});
        let (status, answer) = server.post("/v1/chat/completions", &chat(prompt, extra.clone()));
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["object"], "chat.completion");
        assert_eq!(
            answer["choices"][0]["message"]["content"],
            expected.as_str()
        );
        assert_eq!(answer["choices"][0]["message"]["role"], "assistant");
        let usage = &answer["usage"];
        assert_eq!(
            usage["total_tokens"],
            usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap()
        );
        let finish = answer["choices"][0]["finish_reason"].as_str().unwrap();
        assert!(
            finish == "length" && usage["completion_tokens"] == 16 || finish == "stop",
            "{answer}"
        );

        let mut streamed = chat(prompt, extra.clone());
        streamed["stream"] = json!(true);
        streamed["stream_options"] = json!({"include_usage": true});
        let (status, events) = server.stream("/v1/chat/completions", &streamed);
        assert_eq!(status, 200);
        assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
        assert_eq!(streamed_text(&events), expected);
        let first: Value = serde_json::from_str(&events[0]).unwrap();
        assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
        let usage_chunk: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
        assert_eq!(usage_chunk["choices"], json!([]));
        for count in ["prompt_tokens", "completion_tokens", "total_tokens"] {
            assert_eq!(usage_chunk["usage"][count], usage[count]);
        }
        let last: Value = serde_json::from_str(&events[events.len() - 3]).unwrap();
        assert_eq!(last["choices"][0]["finish_reason"], finish);

        // A completion is the prompt continued without the chat template.
        let mut args = args.to_vec();
        args.push("--ignore-chat-template");
        let expected = generate(MODEL, &args);
        let mut body = extra;
        body["prompt"] = json!(prompt);
        let (status, answer) = server.post("/v1/completions", &body);
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["object"], "text_completion");
        assert_eq!(answer["choices"][0]["text"], expected.as_str());
    }
}

#[test]
fn stop_texts_logprobs_and_token_prompts_are_answered_as_openai_does() {
    let server = Server::start(MODEL, 1, &[], &[]);
    let plain = json!({"prompt": "once upon", "max_tokens": 12, "logit_bias": no_end()});
    let (_, whole) = server.post("/v1/completions", &plain);
    let text = whole["choices"][0]["text"].as_str().unwrap().to_string();
    assert!(text.len() > 6, "{whole}");
    // A stop text from the middle of the answer ends it just before.
    let stop: String = text.chars().skip(3).take(3).collect();
    let mut stopped = plain.clone();
    stopped["stop"] = json!([stop]);
    let (_, answer) = server.post("/v1/completions", &stopped);
    let cut = &text[..text.find(&stop).unwrap()];
    assert_eq!(answer["choices"][0]["text"], cut);
    assert_eq!(answer["choices"][0]["finish_reason"], "stop");
    stopped["stream"] = json!(true);
    let (_, events) = server.stream("/v1/completions", &stopped);
    assert_eq!(streamed_text(&events), cut);

    let mut logprobs = plain.clone();
    logprobs["logprobs"] = json!(3);
    let (_, answer) = server.post("/v1/completions", &logprobs);
    let lp = &answer["choices"][0]["logprobs"];
    let tokens = lp["tokens"].as_array().unwrap();
    assert_eq!(tokens.len(), 12);
    assert_eq!(
        tokens
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect::<String>(),
        text
    );
    for (i, top) in lp["top_logprobs"].as_array().unwrap().iter().enumerate() {
        let top = top.as_object().unwrap();
        assert!(!top.is_empty() && top.len() <= 3, "{top:?}");
        let chosen = lp["token_logprobs"][i].as_f64().unwrap();
        assert!(chosen <= 0.0);
        let best = top
            .values()
            .map(|v| v.as_f64().unwrap())
            .fold(f64::MIN, f64::max);
        assert!(
            chosen <= best + 1e-6,
            "greedy picks the most likely: {chosen} vs {best}"
        );
        assert!((chosen - best).abs() < 1e-6, "greedy: {chosen} vs {best}");
    }

    let extra = json!({"max_tokens": 4, "logprobs": true, "top_logprobs": 2});
    let (_, answer) = server.post("/v1/chat/completions", &chat("hi", extra));
    let content = answer["choices"][0]["logprobs"]["content"]
        .as_array()
        .unwrap();
    assert!(!content.is_empty());
    assert_eq!(content[0]["top_logprobs"].as_array().unwrap().len(), 2);
    // Token ids beside the text, as mlx_lm.server gives them.
    assert!(content[0]["id"].is_u64() && content[0]["top_logprobs"][0]["id"].is_u64());

    // Token ids are a prompt too: the same answer as their text's.
    let (_, tokenizer) = nuvec_lm::load(fixture(MODEL)).unwrap();
    let ids = tokenizer.encode_prompt("hello").unwrap();
    let (_, by_text) = server.post(
        "/v1/completions",
        &json!({"prompt": "hello", "max_tokens": 5}),
    );
    let (status, by_ids) = server.post("/v1/completions", &json!({"prompt": ids, "max_tokens": 5}));
    assert_eq!(status, 200, "{by_ids}");
    assert_eq!(by_ids["choices"][0]["text"], by_text["choices"][0]["text"]);
    assert_eq!(by_ids["usage"]["prompt_tokens"], ids.len());
    let (_, models) = server.request("GET", "/v1/models", &[], b"");
    let models: Value = serde_json::from_str(&models).unwrap();
    assert_eq!(models["object"], "list");
    assert!(models["data"][0]["id"].as_str().unwrap().ends_with(MODEL));
}

/// Each client's streamed answer, run at once from `clients` threads.
fn at_once(server: &Server, bodies: &[Value]) -> Vec<String> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = (bodies.iter())
            .map(|body| {
                scope.spawn(move || {
                    let (status, events) = server.stream("/v1/chat/completions", body);
                    assert_eq!(status, 200);
                    assert_eq!(
                        events.last().map(String::as_str),
                        Some("[DONE]"),
                        "{events:?}"
                    );
                    streamed_text(&events)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn thirty_two_concurrent_streaming_clients_each_get_the_answer_they_get_alone() {
    let server = Server::start(MODEL, 1, &[], &[]);
    let bodies: Vec<Value> = (0..32)
        .map(|i| {
            let extra = json!({"max_tokens": 8 + i % 5, "temperature": if i % 2 == 0 { 0.0 } else { 0.8 },
                               "seed": i, "stream": true});
            chat(&format!("question number {i}"), extra)
        })
        .collect();
    let alone: Vec<String> = bodies
        .iter()
        .map(|body| streamed_text(&server.stream("/v1/chat/completions", body).1))
        .collect();
    let together = at_once(&server, &bodies);
    assert_eq!(together, alone);
    assert_eq!(server.health().1["active_requests"], 0);
}

#[test]
fn hostile_inputs_get_their_status_while_other_clients_streams_finish() {
    let key = "s3cret-key";
    let server = Server::start(
        MODEL,
        1,
        &["--max-body-bytes", "65536"],
        &[("NUVEC_API_KEY", key)],
    );
    let auth = format!("Authorization: Bearer {key}");
    let post = |path: &str, headers: &[&str], body: &[u8]| {
        let mut all = vec![auth.as_str()];
        all.extend_from_slice(headers);
        server.request("POST", path, &all, body)
    };
    // Long streams run throughout.
    let long = chat(
        "keep talking",
        json!({"max_tokens": 60, "stream": true, "seed": 5, "temperature": 0.7, "logit_bias": no_end()}),
    );
    let expected = {
        let (status, text) = post("/v1/chat/completions", &[], long.to_string().as_bytes());
        assert_eq!(status, 200);
        let events: Vec<String> = (text.lines())
            .filter_map(|l| l.strip_prefix("data: "))
            .map(str::to_string)
            .collect();
        streamed_text(&events)
    };
    std::thread::scope(|scope| {
        let streams: Vec<_> = (0..3)
            .map(|_| {
                scope.spawn(|| {
                    let (status, text) =
                        post("/v1/chat/completions", &[], long.to_string().as_bytes());
                    assert_eq!(status, 200);
                    let events: Vec<String> = (text.lines())
                        .filter_map(|l| l.strip_prefix("data: "))
                        .map(str::to_string)
                        .collect();
                    streamed_text(&events)
                })
            })
            .collect();
        let too_long: Vec<u32> = (0..600).map(|i| i % 300).collect();
        let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
            (
                "/v1/chat/completions",
                b"{\"messages\": [".to_vec(),
                400,
                "not valid JSON",
            ),
            (
                "/v1/chat/completions",
                b"\xff\xfe".to_vec(),
                400,
                "not valid JSON",
            ),
            (
                "/v1/chat/completions",
                br#"{"messages": [{"role": "user", "content": "x"}], "max_tokens": "ten"}"#
                    .to_vec(),
                400,
                "'max_tokens' must be",
            ),
            (
                "/v1/chat/completions",
                br#"{"messages": 5}"#.to_vec(),
                400,
                "'messages' must be an array",
            ),
            (
                "/v1/completions",
                br#"{"prompt": {"a": 1}}"#.to_vec(),
                400,
                "'prompt' must be",
            ),
            (
                "/v1/completions",
                br#"{"prompt": [99999999]}"#.to_vec(),
                400,
                "past the model's vocabulary",
            ),
            (
                "/v1/completions",
                br#"{"prompt": "x", "top_k": 100000, "temperature": 0.5}"#.to_vec(),
                400,
                "top_k",
            ),
            (
                "/v1/chat/completions",
                br#"{"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]}"#.to_vec(),
                404,
                "does not exist",
            ),
            (
                "/v1/completions",
                json!({"prompt": too_long}).to_string().into_bytes(),
                400,
                "context is 512",
            ),
            (
                "/v1/completions",
                vec![b' '; 70_000],
                413,
                "over this server's limit",
            ),
            (
                "/v1/nothing",
                b"{}".to_vec(),
                404,
                "there is no POST /v1/nothing",
            ),
        ];
        for (path, body, status, message) in cases {
            let (got, text) = post(path, &[], &body);
            assert_eq!(
                got,
                status,
                "{path} {}: {text}",
                String::from_utf8_lossy(&body[..body.len().min(60)])
            );
            let error: Value =
                serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"));
            let said = error["error"]["message"].as_str().unwrap_or_default();
            assert!(said.contains(message), "{path}: {said}");
            assert!(error["error"]["type"].is_string());
        }
        // The key: missing, wrong, then right.
        let body = chat("x", json!({"max_tokens": 2})).to_string();
        let (status, text) = server.request("POST", "/v1/chat/completions", &[], body.as_bytes());
        assert_eq!(status, 401, "{text}");
        assert!(!text.contains(key));
        let (status, _) =
            server.request("GET", "/v1/models", &["Authorization: Bearer wrong"], b"");
        assert_eq!(status, 401);
        let (status, _) = server.request("GET", "/v1/models", &[&auth], b"");
        assert_eq!(status, 200);
        // /health needs no key.
        assert_eq!(server.health().0, 200);
        // A client gone mid-stream: its generation stops and its sequence leaves the batch.
        let endless = chat(
            "go on",
            json!({"max_tokens": 100000, "stream": true, "logit_bias": no_end()}),
        );
        let mut with_key = endless.clone();
        with_key["model"] = json!(MODEL);
        abandon_stream_with_key(&server.address, &with_key, &auth);
        for stream in streams {
            assert_eq!(stream.join().unwrap(), expected);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.health().1["active_requests"] != 0 {
        assert!(
            Instant::now() < deadline,
            "the abandoned request is still generating: {}",
            server.health().1
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn abandon_stream_with_key(address: &str, body: &Value, auth: &str) {
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    let body = body.to_string();
    write!(
        stream,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n{auth}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut first = [0u8; 512];
    let read = stream.read(&mut first).unwrap();
    let head = String::from_utf8_lossy(&first[..read]).to_string();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    drop(stream);
}

#[test]
fn sigterm_ends_streams_in_flight_with_503_and_the_server_exits() {
    let mut server = Server::start(MODEL, 1, &[], &[]);
    let endless = chat(
        "go on",
        json!({"max_tokens": 100000, "stream": true, "logit_bias": no_end()}),
    );
    let started = Instant::now();
    let events = std::thread::scope(|scope| {
        let stream = scope.spawn(|| server.stream("/v1/chat/completions", &endless));
        while server.health().1["active_requests"] != 1 {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the request never started"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: kill signals the server this test started; no memory is touched.
        unsafe { libc::kill(server.child.id() as i32, libc::SIGTERM) };
        stream.join().unwrap()
    });
    let (status, events) = events;
    assert_eq!(status, 200);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let error: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("shutting down"),
        "{error}"
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let exited = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the server did not exit: {}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(exited.success(), "{exited}: {}", server.log());
}
