//! Reads YAML the way YAML 1.1 readers do, so that tests can check that what
//! `render` writes means to kubectl what we meant.
//!
//! kubectl reads manifests with `sigs.k8s.io/yaml`, which is go-yaml v2: a
//! YAML 1.1 reader in which a plain `on`, `yes`, `y`, `n`, `1_000`, `0x1F` or
//! `2001-12-14` is not a string. The structure is parsed here with
//! `saphyr-parser` (an event parser that reports each scalar's style); every
//! *plain* scalar is then resolved by the union of three rule sets, and is a
//! string only if none of them takes it for something else:
//! - the YAML 1.1 implicit types, as the spec writes them
//!   (yaml.org/type/{bool,null,int,float,timestamp,merge,value}.html);
//! - the YAML 1.2 core schema (which adds `0o17` and `1e3`);
//! - go-yaml v2's own resolver (`resolve.go`: integers by `strconv.ParseInt`
//!   base 0 after dropping `_`, floats by its `yamlStyleFloat`).
//!
//! Why not PyYAML, the reference YAML 1.1 implementation: its resolver leaves
//! out `y`, `Y`, `n`, `N` from bool on purpose, while the spec and go-yaml v2
//! (kubectl) read them as booleans, so it would pass a bare `n` that kubectl
//! misreads; and it would make the test suite depend on Python.
//!
//! Quoted and block scalars are strings. Tags, anchors and aliases are
//! rejected: `render` never writes them.

// Each test binary that includes this file uses part of it.
#![allow(dead_code)]

use std::sync::LazyLock;

use regex::Regex;
use saphyr_parser::{Event, Parser, ScalarStyle};
use serde_json::{Map, Value};

/// What a plain scalar is to at least one of the readers.
#[derive(Debug, Clone, PartialEq)]
pub enum Plain {
    Str,
    Bool(bool),
    Null,
    /// An integer, with its value when it is plain decimal.
    Int(Option<i64>),
    Float,
    Timestamp,
    /// `<<` (merge) or `=` (value).
    Special,
}

fn full(pattern: &str) -> Regex {
    Regex::new(&format!("^(?:{pattern})$")).expect("test regex compiles")
}

/// The rules, compiled once.
struct Rules {
    bool_true: Regex,
    bool_false: Regex,
    null: Regex,
    int_11: Regex,
    int_12: Regex,
    int_go: Regex,
    decimal: Regex,
    float_11: Regex,
    float_12: Regex,
    timestamp: Regex,
}

static RULES: LazyLock<Rules> = LazyLock::new(|| {
    Rules {
    bool_true: full("y|Y|yes|Yes|YES|true|True|TRUE|on|On|ON"),
    bool_false: full("n|N|no|No|NO|false|False|FALSE|off|Off|OFF"),
    null: full("~|null|Null|NULL|"),
    int_11: full(
        "[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+",
    ),
    int_12: full("[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+"),
    // strconv.ParseInt(s, 0, 64) after strings.Replace(s, "_", "", -1).
    int_go: full("[-+]?(?:0[bB][01]+|0[oO][0-7]+|0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)"),
    decimal: full("[-+]?(?:0|[1-9][0-9]*)"),
    float_11: full(
        r"[-+]?(?:[0-9][0-9_]*)?\.[0-9.]*(?:[eE][-+][0-9]+)?|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)",
    ),
    // YAML 1.2 core, and go-yaml v2's yamlStyleFloat plus its .inf/.nan words.
    float_12: full(
        r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)",
    ),
    timestamp: full(
        r"[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]|[0-9][0-9][0-9][0-9]-[0-9][0-9]?-[0-9][0-9]?(?:[Tt]|[ \t]+)[0-9][0-9]?:[0-9][0-9]:[0-9][0-9](?:\.[0-9]*)?(?:[ \t]*(?:Z|[-+][0-9][0-9]?(?::[0-9][0-9])?))?",
    ),
}
});

/// Resolves a plain scalar by the union of YAML 1.1, YAML 1.2 core and
/// go-yaml v2 rules.
pub fn resolve_plain(text: &str) -> Plain {
    let Rules {
        bool_true,
        bool_false,
        null,
        int_11,
        int_12,
        int_go,
        decimal,
        float_11,
        float_12,
        timestamp,
    } = &*RULES;
    if bool_true.is_match(text) {
        Plain::Bool(true)
    } else if bool_false.is_match(text) {
        Plain::Bool(false)
    } else if null.is_match(text) {
        Plain::Null
    } else if int_11.is_match(text)
        || int_12.is_match(text)
        || int_go.is_match(&text.replace('_', ""))
    {
        Plain::Int(decimal.is_match(text).then(|| text.parse().ok()).flatten())
    } else if float_11.is_match(text) || float_12.is_match(text) {
        Plain::Float
    } else if timestamp.is_match(text) {
        Plain::Timestamp
    } else if text == "<<" || text == "=" {
        Plain::Special
    } else {
        Plain::Str
    }
}

/// A scalar as JSON: strings stay strings; a plain scalar that is not a
/// string becomes what it is, and values JSON cannot hold (floats,
/// timestamps, non-decimal integers) a marked string that equals no
/// expected string (`"!!float 1e3"`).
fn scalar(text: &str, style: ScalarStyle) -> Value {
    if style != ScalarStyle::Plain {
        return Value::String(text.to_owned());
    }
    match resolve_plain(text) {
        Plain::Str => Value::String(text.to_owned()),
        Plain::Bool(b) => Value::Bool(b),
        Plain::Null => Value::Null,
        Plain::Int(Some(n)) => Value::from(n),
        Plain::Int(None) => Value::String(format!("!!int {text}")),
        Plain::Float => Value::String(format!("!!float {text}")),
        Plain::Timestamp => Value::String(format!("!!timestamp {text}")),
        Plain::Special => Value::String(format!("!!merge {text}")),
    }
}

/// A mapping key as JSON reads it: a string, or the marked text of what it
/// resolved to.
fn key(value: Value) -> String {
    match value {
        Value::String(s) => s,
        other => format!("!!{other}"),
    }
}

enum Open {
    Seq(Vec<Value>),
    Map(Map<String, Value>, Option<String>),
}

/// The one document in `yaml`, as a YAML 1.1 reader builds it.
pub fn load(yaml: &str) -> Result<Value, String> {
    let mut stack: Vec<Open> = Vec::new();
    let mut documents = Vec::new();
    for event in Parser::new_from_str(yaml) {
        let (event, span) = event.map_err(|e| format!("YAML syntax: {e}"))?;
        let value = match event {
            Event::Scalar(text, style, anchor, tag) => {
                if tag.is_some() || anchor != 0 {
                    return Err(format!("unexpected tag or anchor at {:?}", span.start));
                }
                scalar(&text, style)
            }
            Event::SequenceStart(anchor, tag) | Event::MappingStart(anchor, tag)
                if anchor != 0 || tag.is_some() =>
            {
                return Err(format!("unexpected tag or anchor at {:?}", span.start));
            }
            Event::SequenceStart(..) => {
                stack.push(Open::Seq(Vec::new()));
                continue;
            }
            Event::MappingStart(..) => {
                stack.push(Open::Map(Map::new(), None));
                continue;
            }
            Event::SequenceEnd | Event::MappingEnd => match stack.pop() {
                Some(Open::Seq(items)) => Value::Array(items),
                Some(Open::Map(map, None)) => Value::Object(map),
                _ => return Err("unbalanced collection".to_owned()),
            },
            Event::Alias(_) => return Err(format!("unexpected alias at {:?}", span.start)),
            _ => continue,
        };
        match stack.last_mut() {
            None => documents.push(value),
            Some(Open::Seq(items)) => items.push(value),
            Some(Open::Map(map, pending)) => match pending.take() {
                None => *pending = Some(key(value)),
                Some(k) => {
                    if map.insert(k.clone(), value).is_some() {
                        return Err(format!("duplicate key '{k}'"));
                    }
                }
            },
        }
    }
    match <[Value; 1]>::try_from(documents) {
        Ok([document]) => Ok(document),
        Err(documents) => Err(format!("expected one document, got {}", documents.len())),
    }
}

/// The resolver itself must see what kubectl sees: the cases from the issue
/// and the spec's examples. Called from a test in each binary that uses it.
pub fn self_check() {
    for (text, want) in [
        ("on", Plain::Bool(true)),
        ("yes", Plain::Bool(true)),
        ("Y", Plain::Bool(true)),
        ("n", Plain::Bool(false)),
        ("OFF", Plain::Bool(false)),
        ("true", Plain::Bool(true)),
        ("~", Plain::Null),
        ("", Plain::Null),
        ("NULL", Plain::Null),
        ("110", Plain::Int(Some(110))),
        ("-7", Plain::Int(Some(-7))),
        ("1_000", Plain::Int(None)),
        ("0x1F", Plain::Int(None)),
        ("0o17", Plain::Int(None)),
        ("017", Plain::Int(None)),
        ("0b101", Plain::Int(None)),
        ("190:20:30", Plain::Int(None)),
        ("1e3", Plain::Float),
        ("1.5", Plain::Float),
        ("6.8523015e+5", Plain::Float),
        (".inf", Plain::Float),
        ("-.INF", Plain::Float),
        (".NaN", Plain::Float),
        ("2001-12-14", Plain::Timestamp),
        ("2001-12-14t21:59:43.10-05:00", Plain::Timestamp),
        ("2001-12-14 21:59:43.10 -5", Plain::Timestamp),
        ("<<", Plain::Special),
        ("=", Plain::Special),
        ("demo", Plain::Str),
        ("500m", Plain::Str),
        ("5%", Plain::Str),
        ("bottlerocket@latest", Plain::Str),
        ("KarpenterNodeRole-demo", Plain::Str),
        ("x86-64-gpu", Plain::Str),
        ("yess", Plain::Str),
    ] {
        assert_eq!(resolve_plain(text), want, "{text:?}");
    }
    let doc = load("a: on\nb: \"on\"\nc:\n- 1_000\n- |\n  x\n  y\n\"y\": n\n").unwrap();
    assert_eq!(
        doc,
        serde_json::json!({
            "a": true, "b": "on", "c": ["!!int 1_000", "x\ny\n"], "y": false
        })
    );
    let keyed = load("y: 1\n").unwrap();
    assert_eq!(keyed, serde_json::json!({"!!true": 1}));
    assert!(load("a: 1\na: 2\n").unwrap_err().contains("duplicate"));
    assert!(load("a: &x 1\nb: *x\n").is_err());
    assert!(load("a: !!str 1\n").is_err());
    assert!(load("a: [1\n").is_err());
}
