//! Every YAML document `render` writes, emitted so that any YAML reader —
//! YAML 1.1 (kubectl's `sigs.k8s.io/yaml`, go-yaml v2, PyYAML), YAML 1.2 —
//! reads back exactly the types we meant.
//!
//! `serde_yaml` quotes a string only when *its own* (YAML 1.2) resolver would
//! take it for something else, so `on`, `yes`, `n`, `1_000` or `0o17` come out
//! plain, and a YAML 1.1 reader turns them into booleans and numbers (the
//! cluster name `on` as the `karpenter.sh/discovery` tag value, a label value
//! `true`). Here a string scalar is written plain only when it cannot be
//! anything but a string in any of those readers: it starts with an ASCII
//! letter, holds only letters, digits and `-._/@`, and is none of the words
//! YAML 1.1 resolves to a boolean or null (`y`, `n`, `yes`, `no`, `on`, `off`,
//! `true`, `false`, `null`, in any case). Every YAML 1.1 implicit type other
//! than bool and null (int, float, timestamp, merge `<<`, value `=`) starts
//! with a digit, a sign, a dot or a symbol, so the letter rule keeps them
//! out. Everything else is double-quoted with escapes, except multi-line
//! values that read back byte for byte as a literal block (`|`).
//!
//! The document is built from the serde value (`serde_yaml::to_value`, which
//! keeps field order), never from string templates.

use std::fmt::Write as _;

use serde::Serialize;
use serde_yaml::{Mapping, Value};

/// Why a value cannot be written as YAML by this emitter.
#[derive(Debug, thiserror::Error)]
pub enum YamlError {
    #[error("cannot convert to a YAML value")]
    Serialize(#[from] serde_yaml::Error),
    #[error("a YAML tag ('!{0}') is not written by accelready")]
    Tagged(String),
    #[error("a mapping key must be a scalar, not a {0}")]
    ComplexKey(&'static str),
}

/// The block-style YAML for `value`: two-space indents, sequences at their
/// key's indent (as kubectl prints them), a final newline.
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> Result<String, YamlError> {
    let value = serde_yaml::to_value(value)?;
    let mut out = String::new();
    match &value {
        Value::Mapping(map) if !map.is_empty() => mapping(map, 0, &mut out)?,
        Value::Sequence(items) if !items.is_empty() => sequence(items, 0, &mut out)?,
        other => {
            out.push_str(&scalar(other)?);
            out.push('\n');
        }
    }
    Ok(out)
}

fn indent(out: &mut String, level: usize) {
    out.extend(std::iter::repeat_n(' ', level));
}

fn mapping(map: &Mapping, level: usize, out: &mut String) -> Result<(), YamlError> {
    for (key, value) in map {
        indent(out, level);
        out.push_str(&key_text(key)?);
        out.push(':');
        child(value, level, out)?;
    }
    Ok(())
}

fn sequence(items: &[Value], level: usize, out: &mut String) -> Result<(), YamlError> {
    for item in items {
        match item {
            Value::Mapping(map) if !map.is_empty() => {
                // The first entry goes on the dash's line: render at level + 2
                // and put "- " in place of that entry's indent.
                let mut block = String::new();
                mapping(map, level + 2, &mut block)?;
                indent(out, level);
                out.push_str("- ");
                out.push_str(&block[level + 2..]);
            }
            Value::Sequence(inner) if !inner.is_empty() => {
                indent(out, level);
                out.push_str("-\n");
                sequence(inner, level + 2, out)?;
            }
            other => {
                indent(out, level);
                out.push_str("- ");
                out.push_str(&scalar(other)?);
                out.push('\n');
            }
        }
    }
    Ok(())
}

/// What follows `key:` — a nested block, a literal block, or ` scalar`.
fn child(value: &Value, level: usize, out: &mut String) -> Result<(), YamlError> {
    match value {
        Value::Mapping(map) if !map.is_empty() => {
            out.push('\n');
            mapping(map, level + 2, out)
        }
        Value::Sequence(items) if !items.is_empty() => {
            out.push('\n');
            sequence(items, level, out)
        }
        Value::String(text) if literal_block_reads_back(text) => {
            out.push_str(" |\n");
            for line in text.lines() {
                if !line.is_empty() {
                    indent(out, level + 2);
                    out.push_str(line);
                }
                out.push('\n');
            }
            Ok(())
        }
        other => {
            out.push(' ');
            out.push_str(&scalar(other)?);
            out.push('\n');
            Ok(())
        }
    }
}

fn key_text(key: &Value) -> Result<String, YamlError> {
    match key {
        Value::Sequence(_) => Err(YamlError::ComplexKey("sequence")),
        Value::Mapping(_) => Err(YamlError::ComplexKey("mapping")),
        other => scalar(other),
    }
}

fn scalar(value: &Value) -> Result<String, YamlError> {
    Ok(match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(text) => string_scalar(text),
        Value::Sequence(_) => "[]".to_owned(),
        Value::Mapping(_) => "{}".to_owned(),
        Value::Tagged(tagged) => return Err(YamlError::Tagged(tagged.tag.to_string())),
    })
}

/// `text` as a plain scalar when no YAML reader can take it for anything but
/// a string, else double-quoted.
pub fn string_scalar(text: &str) -> String {
    if plain_is_a_string(text) {
        text.to_owned()
    } else {
        double_quoted(text)
    }
}

/// Words that YAML 1.1 resolves to a boolean (`y|Y|yes|Yes|YES|n|N|no|No|NO|
/// true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF`) or null
/// (`null|Null|NULL`); compared case-insensitively, a superset.
const BOOL_AND_NULL_WORDS: [&str; 9] =
    ["y", "n", "yes", "no", "on", "off", "true", "false", "null"];

/// True when `text`, written plain, is a string to every YAML 1.1 and 1.2
/// reader: see the module documentation for why this rule is enough.
pub fn plain_is_a_string(text: &str) -> bool {
    let mut chars = text.chars();
    let Some(first) = chars.next() else {
        return false;
    };
    first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '/' | '@'))
        && !BOOL_AND_NULL_WORDS
            .iter()
            .any(|word| word.eq_ignore_ascii_case(text))
}

/// A double-quoted scalar whose escapes mean the same in YAML 1.1 and 1.2:
/// only `\"`, `\\`, `\t`, `\n`, `\r`, `\xXX`, `\uXXXX` and `\UXXXXXXXX`; every
/// character outside printable ASCII is escaped (YAML 1.1 reads U+0085,
/// U+2028 and U+2029 as line breaks).
pub fn double_quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            ' '..='~' => out.push(c),
            c if (c as u32) < 0x100 => {
                let _ = write!(out, "\\x{:02X}", c as u32);
            }
            c if (c as u32) < 0x10000 => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => {
                let _ = write!(out, "\\U{:08X}", c as u32);
            }
        }
    }
    out.push('"');
    out
}

/// A literal block (`|`, clip chomping) reads back as exactly `text` when the
/// text is printable ASCII lines (tabs allowed) ending in exactly one newline,
/// and its first line is not empty and does not start with a space (which
/// would call for an indentation indicator).
fn literal_block_reads_back(text: &str) -> bool {
    text.contains('\n')
        && text.ends_with('\n')
        && !text.ends_with("\n\n")
        && !text.starts_with([' ', '\n'])
        && text.chars().all(|c| matches!(c, ' '..='~' | '\n' | '\t'))
        && text
            .lines()
            .next()
            .is_some_and(|first| !first.starts_with('\t'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Doc {
        api_version: &'static str,
        names: Vec<&'static str>,
        tags: BTreeMap<&'static str, &'static str>,
        count: u32,
        empty: Vec<u8>,
        body: &'static str,
        items: Vec<BTreeMap<&'static str, &'static str>>,
    }

    #[test]
    fn block_layout_follows_field_order() {
        let doc = Doc {
            api_version: "karpenter.k8s.aws/v1",
            names: vec!["on", "plain"],
            tags: BTreeMap::from([("karpenter.sh/discovery", "1_000"), ("y", "x")]),
            count: 110,
            empty: vec![],
            body: "# comment\n[a]\n\nb = 1\n",
            items: vec![BTreeMap::from([
                ("alias", "bottlerocket@latest"),
                ("b", "c"),
            ])],
        };
        let text = to_string(&doc).unwrap();
        assert_eq!(
            text,
            "apiVersion: karpenter.k8s.aws/v1\n\
             names:\n\
             - \"on\"\n\
             - plain\n\
             tags:\n  karpenter.sh/discovery: \"1_000\"\n  \"y\": x\n\
             count: 110\n\
             empty: []\n\
             body: |\n  # comment\n  [a]\n\n  b = 1\n\
             items:\n\
             - alias: bottlerocket@latest\n  b: c\n"
        );
    }

    #[test]
    fn plain_only_when_every_reader_sees_a_string() {
        for plain in [
            "demo",
            "KarpenterNodeRole-demo",
            "bottlerocket@latest",
            "karpenter.sh/discovery",
            "x86-64-gpu",
            "Bottlerocket",
            "memory.available",
            "e3",
            "ONE",
        ] {
            assert!(plain_is_a_string(plain), "{plain}");
        }
        for quoted in [
            "",
            "on",
            "On",
            "ON",
            "oN",
            "yes",
            "y",
            "Y",
            "n",
            "N",
            "no",
            "off",
            "true",
            "False",
            "null",
            "Null",
            "~",
            "1_000",
            "0x1F",
            "0o17",
            "1e3",
            "1.5",
            ".inf",
            "-.inf",
            ".NaN",
            "2001-12-14",
            "2001-12-14t21:59:43.10-05:00",
            "<<",
            "=",
            "12:30:00",
            "500m",
            "5%",
            "-x",
            "a b",
            "a: b",
            "a#b",
            "*ref",
            "&a",
            "!tag",
            "@x",
            "`x",
            "'x",
            "\"x",
            "a,b",
            "[x]",
            "{x}",
            "ünï",
            "a\nb",
        ] {
            assert!(!plain_is_a_string(quoted), "{quoted:?}");
        }
    }

    #[test]
    fn double_quotes_escape_what_yaml_1_1_treats_specially() {
        assert_eq!(double_quoted("on"), "\"on\"");
        assert_eq!(double_quoted("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(double_quoted("t\tn\nr\r"), "\"t\\tn\\nr\\r\"");
        assert_eq!(double_quoted("\u{1}\u{7f}\u{85}"), "\"\\x01\\x7F\\x85\"");
        assert_eq!(double_quoted("\u{2028}\u{1F600}"), "\"\\u2028\\U0001F600\"");
    }

    #[test]
    fn literal_blocks_only_when_they_read_back() {
        assert!(literal_block_reads_back("a\n\nb\n"));
        for no in [
            "a", "a\n\n", " a\nb\n", "\na\n", "a\nb", "ü\n", "a\r\nb\n", "\ta\n",
        ] {
            assert!(!literal_block_reads_back(no), "{no:?}");
        }
        #[derive(Serialize)]
        struct Body {
            body: &'static str,
        }
        assert_eq!(
            to_string(&Body { body: "a\nb" }).unwrap(),
            "body: \"a\\nb\"\n"
        );
    }

    #[test]
    fn nested_sequences_and_scalars_at_the_top() {
        assert_eq!(
            to_string(&vec![vec!["a"], vec![]]).unwrap(),
            "-\n  - a\n- []\n"
        );
        assert_eq!(to_string("yes").unwrap(), "\"yes\"\n");
        assert_eq!(to_string(&Option::<u8>::None).unwrap(), "null\n");
    }
}
