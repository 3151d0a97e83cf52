//! kubectl JSON cut into pieces as it streams: the members of the top-level
//! object and, one at a time, the elements of a list in it (`items`), each
//! handed to serde as a slice. serde parses a slice several times faster
//! than a byte stream, and only one piece (a node) is in memory at a time.
//!
//! The scanner checks the top-level punctuation itself (`{`, keys, `:`, `,`,
//! `}`, `[`, `]`, nothing after the end) with serde's wording, and finds where
//! a value ends by counting brackets outside strings; serde then parses each
//! piece in full. A piece serde accepts was cut exactly where its value ends,
//! so the pieces together accept the JSON serde accepts. A byte that no JSON
//! can hold outside a string (or a control character in one) stops the scan
//! where it is, so the first invalid byte ends the read; a single value over
//! `max_piece` bytes ends it too.

use std::io::{self, Read};

use serde::de::IgnoredAny;

/// Bytes read at a time.
const BUFFER: usize = 64 * 1024;
/// Nesting deeper than serde_json's own limit fails at once.
const MAX_DEPTH: usize = 128;

/// Where a piece starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// 1-based.
    pub line: usize,
    /// Bytes before the piece on its line.
    pub before: usize,
}

impl Position {
    /// Where serde's `line` and `column`, counted in a piece that starts
    /// here, fall in the whole input.
    pub fn locate(self, line: usize, column: usize) -> (usize, usize) {
        if line <= 1 {
            (self.line, self.before + column)
        } else {
            (self.line + line - 1, column)
        }
    }
}

#[derive(Debug)]
pub enum ScanError {
    Io(io::Error),
    /// Not JSON: serde's message, and where (1-based line and column).
    Syntax {
        message: String,
        line: usize,
        column: usize,
    },
    /// One value (the one starting at `at`) is larger than the limit.
    TooLarge {
        at: Position,
        limit: usize,
    },
}

impl From<io::Error> for ScanError {
    fn from(error: io::Error) -> ScanError {
        ScanError::Io(error)
    }
}

impl ScanError {
    /// A serde error in a piece that starts at `at`.
    pub fn in_piece(error: &serde_json::Error, at: Position) -> ScanError {
        let (line, column) = at.locate(error.line(), error.column());
        ScanError::Syntax {
            message: message(error),
            line,
            column,
        }
    }
}

/// serde's message without its " at line L column C".
pub fn message(error: &serde_json::Error) -> String {
    let text = error.to_string();
    let suffix = format!(" at line {} column {}", error.line(), error.column());
    match text.strip_suffix(&suffix) {
        Some(message) => message.to_owned(),
        None => text,
    }
}

/// An object or a list, for [`Scanner::next_in`]: its closing byte and
/// serde's words for what is missing.
#[derive(Clone, Copy)]
struct Container {
    close: u8,
    expected: &'static str,
    eof: &'static str,
}

pub struct Scanner<R> {
    reader: R,
    buffer: Box<[u8]>,
    pos: usize,
    end: usize,
    /// Bytes of input before `buffer[0]`.
    base: u64,
    eof: bool,
    /// The current line (1-based) and the input offset where it starts.
    line: usize,
    line_start: u64,
    piece: Vec<u8>,
    max_piece: usize,
}

impl<R: Read> Scanner<R> {
    pub fn new(reader: R, max_piece: usize) -> Scanner<R> {
        Scanner {
            reader,
            buffer: vec![0; BUFFER].into_boxed_slice(),
            pos: 0,
            end: 0,
            base: 0,
            eof: false,
            line: 1,
            line_start: 0,
            piece: Vec::new(),
            max_piece,
        }
    }

    /// Whether the document is an object (its `{` is then consumed).
    pub fn object_start(&mut self) -> Result<bool, ScanError> {
        self.open(b'{')
    }

    /// The next member's key (its `:` consumed), or `None` once the
    /// object's `}` is consumed. `first`: no `,` before it.
    pub fn next_key(&mut self, first: bool) -> Result<Option<String>, ScanError> {
        const OBJECT: Container = Container {
            close: b'}',
            expected: "expected `,` or `}`",
            eof: "EOF while parsing an object",
        };
        if !self.next_in(OBJECT, first)? {
            return Ok(None);
        }
        match self.peek()? {
            Some(b'"') => {}
            Some(_) => return Err(self.error_here("key must be a string")),
            None => return Err(self.error_at_end("EOF while parsing an object")),
        }
        let (piece, at) = self.capture()?;
        let key: String = serde_json::from_slice(piece).map_err(|e| ScanError::in_piece(&e, at))?;
        match self.peek()? {
            Some(b':') => {
                self.pos += 1;
                Ok(Some(key))
            }
            Some(_) => Err(self.error_here("expected `:`")),
            None => Err(self.error_at_end("EOF while parsing an object")),
        }
    }

    /// Whether the next value is a list (its `[` is then consumed).
    pub fn list_start(&mut self) -> Result<bool, ScanError> {
        self.open(b'[')
    }

    /// The list's next element, or `None` once its `]` is consumed.
    /// `first`: no `,` before it.
    pub fn next_element(&mut self, first: bool) -> Result<Option<(&[u8], Position)>, ScanError> {
        const LIST: Container = Container {
            close: b']',
            expected: "expected `,` or `]`",
            eof: "EOF while parsing a list",
        };
        if !self.next_in(LIST, first)? {
            return Ok(None);
        }
        self.value().map(Some)
    }

    /// Whether the next value opens with `open` (then consumed).
    fn open(&mut self, open: u8) -> Result<bool, ScanError> {
        match self.peek()? {
            Some(byte) if byte == open => {
                self.pos += 1;
                Ok(true)
            }
            Some(_) => Ok(false),
            None => Err(self.error_at_end("EOF while parsing a value")),
        }
    }

    /// Past the `,` before the next entry of `container` (none before the
    /// first): whether there is one, or its closing byte was consumed.
    fn next_in(&mut self, container: Container, first: bool) -> Result<bool, ScanError> {
        match self.peek()? {
            Some(byte) if byte == container.close => {
                self.pos += 1;
                Ok(false)
            }
            Some(b',') if !first => {
                self.pos += 1;
                Ok(true)
            }
            Some(_) if first => Ok(true),
            Some(_) => Err(self.error_here(container.expected)),
            None if first => Ok(true),
            None => Err(self.error_at_end(container.eof)),
        }
    }

    /// The next value, whole.
    pub fn value(&mut self) -> Result<(&[u8], Position), ScanError> {
        match self.peek()? {
            Some(_) => self.capture(),
            None => Err(self.error_at_end("EOF while parsing a value")),
        }
    }

    /// After the document only whitespace may follow.
    pub fn finish(&mut self) -> Result<(), ScanError> {
        match self.peek()? {
            None => Ok(()),
            Some(_) => Err(self.error_here("trailing characters")),
        }
    }

    fn here(&self) -> Position {
        let offset = self.base + self.pos as u64;
        Position {
            line: self.line,
            before: (offset - self.line_start) as usize,
        }
    }

    /// At the next byte, as serde counts: its 1-based column.
    fn error_here(&self, message: &str) -> ScanError {
        let at = self.here();
        ScanError::Syntax {
            message: message.to_owned(),
            line: at.line,
            column: at.before + 1,
        }
    }

    /// At the end of the input, as serde counts: the bytes on the last line.
    fn error_at_end(&self, message: &str) -> ScanError {
        let at = self.here();
        ScanError::Syntax {
            message: message.to_owned(),
            line: at.line,
            column: at.before,
        }
    }

    /// Whether a byte is there at `pos`, reading more when needed.
    fn fill(&mut self) -> io::Result<bool> {
        if self.pos < self.end {
            return Ok(true);
        }
        if self.eof {
            return Ok(false);
        }
        self.base += self.end as u64;
        self.pos = 0;
        self.end = 0;
        loop {
            match self.reader.read(&mut self.buffer) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(false);
                }
                Ok(count) => {
                    self.end = count;
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Skips whitespace; the next byte, not consumed; `None` at the end.
    fn peek(&mut self) -> Result<Option<u8>, ScanError> {
        while self.fill()? {
            match self.buffer[self.pos] {
                b' ' | b'\t' | b'\r' => self.pos += 1,
                b'\n' => {
                    self.pos += 1;
                    self.line += 1;
                    self.line_start = self.base + self.pos as u64;
                }
                byte => return Ok(Some(byte)),
            }
        }
        Ok(None)
    }

    /// The value that starts at the next byte: an object or a list to its
    /// closing bracket, a string to its closing quote, anything else (a
    /// number, `true`, ...) up to the first byte that cannot be part of it.
    /// Cut short at the end of the input (serde then says what is missing).
    fn capture(&mut self) -> Result<(&[u8], Position), ScanError> {
        let at = self.here();
        self.piece.clear();
        let first = if self.fill()? {
            self.buffer[self.pos]
        } else {
            0
        };
        let nested = first == b'{' || first == b'[';
        let mut in_string = first == b'"';
        let mut depth = 0usize;
        let mut escaped = false;
        let mut started = false;
        while self.fill()? {
            let from = self.pos;
            let mut index = from;
            let mut done = false;
            let mut bad = false;
            let bytes = &self.buffer[..self.end];
            if !started {
                started = true;
                if in_string {
                    index += 1;
                }
            }
            while index < bytes.len() {
                let byte = bytes[index];
                if in_string {
                    if escaped {
                        escaped = false;
                    } else if byte == b'"' {
                        in_string = false;
                        if depth == 0 {
                            index += 1;
                            done = true;
                            break;
                        }
                    } else if byte == b'\\' {
                        escaped = true;
                    } else if byte < 0x20 {
                        bad = true;
                        break;
                    }
                    index += 1;
                    continue;
                }
                if !nested {
                    // A number or a literal: up to the first byte that
                    // cannot be part of one, which the caller then judges.
                    if !is_scalar(byte) {
                        done = true;
                        break;
                    }
                    index += 1;
                    continue;
                }
                match byte {
                    b'"' => in_string = true,
                    b'{' | b'[' => {
                        depth += 1;
                        if depth > MAX_DEPTH {
                            let column = self.base + index as u64 - self.line_start + 1;
                            return Err(ScanError::Syntax {
                                message: "recursion limit exceeded".to_owned(),
                                line: self.line,
                                column: column as usize,
                            });
                        }
                    }
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            index += 1;
                            done = true;
                            break;
                        }
                    }
                    b'\n' => {
                        self.line += 1;
                        self.line_start = self.base + index as u64 + 1;
                    }
                    b',' | b':' | b' ' | b'\t' | b'\r' => {}
                    byte if is_scalar(byte) => {}
                    _ => {
                        bad = true;
                        break;
                    }
                }
                index += 1;
            }
            let end = if bad { index + 1 } else { index };
            self.piece.extend_from_slice(&bytes[from..end]);
            self.pos = index;
            if bad {
                return Err(self.invalid(at));
            }
            if done {
                break;
            }
            if self.piece.len() > self.max_piece {
                return Err(ScanError::TooLarge {
                    at,
                    limit: self.max_piece,
                });
            }
        }
        if self.piece.is_empty() {
            return Err(self.error_here("expected value"));
        }
        Ok((&self.piece, at))
    }

    /// The error serde found in the piece just captured (starting at `at`),
    /// where it is in the input. A piece cut by a delimiter that serde finds
    /// unfinished (`tru` before `}`) is judged with that delimiter, as serde
    /// would judge the whole input.
    pub fn piece_error(&mut self, error: &serde_json::Error, at: Position) -> ScanError {
        if error.classify() == serde_json::error::Category::Eof {
            if let Ok(true) = self.fill() {
                let mut cut = self.piece.clone();
                cut.push(self.buffer[self.pos]);
                if let Err(error) = serde_json::from_slice::<IgnoredAny>(&cut) {
                    return ScanError::in_piece(&error, at);
                }
            }
        }
        ScanError::in_piece(error, at)
    }

    /// The piece ends in a byte JSON cannot have there: serde says what is
    /// wrong, at that byte or before it.
    fn invalid(&self, at: Position) -> ScanError {
        match serde_json::from_slice::<IgnoredAny>(&self.piece) {
            Err(error) => ScanError::in_piece(&error, at),
            Ok(_) => ScanError::Syntax {
                message: "invalid character".to_owned(),
                line: at.line,
                column: at.before + self.piece.len(),
            },
        }
    }
}

/// A byte of a number or of `true`, `false`, `null`.
fn is_scalar(byte: u8) -> bool {
    matches!(
        byte,
        b'0'..=b'9'
            | b'-'
            | b'+'
            | b'.'
            | b'E'
            | b'a'
            | b'e'
            | b'f'
            | b'l'
            | b'n'
            | b'r'
            | b's'
            | b't'
            | b'u'
    )
}

/// A reader that yields at most `.1` bytes per read, so that buffer
/// boundaries fall anywhere in a value.
#[cfg(test)]
pub(super) struct Trickle<'a>(pub &'a [u8], pub usize);

#[cfg(test)]
impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let count = self.0.len().min(buf.len()).min(self.1);
        buf[..count].copy_from_slice(&self.0[..count]);
        self.0 = &self.0[count..];
        Ok(count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every top-level member as (key, value text), or the first error as
    /// serde's whole-document wording would put it.
    fn members(input: &str, chunk: usize) -> Result<Vec<(String, String)>, String> {
        let mut scanner = Scanner::new(Trickle(input.as_bytes(), chunk), 1 << 20);
        let describe = |e: ScanError| match e {
            ScanError::Syntax {
                message,
                line,
                column,
            } => format!("{message} at line {line} column {column}"),
            other => format!("{other:?}"),
        };
        let mut out = Vec::new();
        if !scanner.object_start().map_err(describe)? {
            let (piece, at) = scanner.value().map_err(describe)?;
            let text = String::from_utf8_lossy(piece).into_owned();
            if let Err(e) = serde_json::from_slice::<IgnoredAny>(piece) {
                return Err(describe(scanner.piece_error(&e, at)));
            }
            out.push((String::new(), text));
            scanner.finish().map_err(describe)?;
            return Ok(out);
        }
        let mut first = true;
        while let Some(key) = scanner.next_key(first).map_err(describe)? {
            first = false;
            if key == "items" && scanner.list_start().map_err(describe)? {
                let mut index = 0;
                while let Some((piece, at)) = scanner.next_element(index == 0).map_err(describe)? {
                    let text = String::from_utf8_lossy(piece).into_owned();
                    if let Err(e) = serde_json::from_slice::<IgnoredAny>(piece) {
                        return Err(describe(scanner.piece_error(&e, at)));
                    }
                    out.push((format!("items[{index}]"), text));
                    index += 1;
                }
                continue;
            }
            let (piece, at) = scanner.value().map_err(describe)?;
            let text = String::from_utf8_lossy(piece).into_owned();
            if let Err(e) = serde_json::from_slice::<IgnoredAny>(piece) {
                return Err(describe(scanner.piece_error(&e, at)));
            }
            out.push((key, text));
        }
        scanner.finish().map_err(describe)?;
        Ok(out)
    }

    #[test]
    fn members_and_items_are_cut_where_their_values_end() {
        let input = "{\n  \"kind\": \"List\",\n  \"items\": [\n    {\"a\": [1, {\"b\": \"}]\\\"\"}]},\n    -1.5e3, true, null, \"x\"\n  ],\n  \"k\\u0069nd2\": {}\n}\n";
        for chunk in [1, 2, 3, 7, 64, 1 << 16] {
            let found = members(input, chunk).unwrap();
            let expected = [
                ("kind", "\"List\""),
                ("items[0]", "{\"a\": [1, {\"b\": \"}]\\\"\"}]}"),
                ("items[1]", "-1.5e3"),
                ("items[2]", "true"),
                ("items[3]", "null"),
                ("items[4]", "\"x\""),
                ("kind2", "{}"),
            ];
            let found: Vec<(&str, &str)> = found
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            assert_eq!(found, expected, "chunk {chunk}");
        }
    }

    #[test]
    fn errors_read_as_serde_writes_them_for_the_whole_document() {
        let cases = [
            "",
            "   ",
            "\u{0}\u{0}",
            "{",
            "{\"a\"",
            "{\"a\":",
            "{\"a\" 1}",
            "{\"a\":1",
            "{\"a\":1,}",
            "{\"a\":1 \"b\":2}",
            "{1:2}",
            "{\"a\":}",
            "{\"a\":,}",
            "{\"a\":tru}",
            "{\"a\":truex}",
            "{\"a\":1x}",
            "{\"a\":\"x\ny\"}",
            "{\"a\":\"x",
            "{\"a\":[1,2}",
            "{\"a\":{\"b\":1]}",
            "{\"items\":[1,]}",
            "{\"items\":[1 2]}",
            "{\"items\":[1,2",
            "{\"items\":[{\"a\":\n  ,}]}",
            "{} x",
            "{\n  \"a\": {\n    \"b\": \u{7}\n  }\n}",
            "{\"a\":\"\\q\"}",
        ];
        for input in cases {
            let expected = serde_json::from_str::<IgnoredAny>(input)
                .unwrap_err()
                .to_string();
            for chunk in [1, 5, 1 << 16] {
                let found = members(input, chunk).unwrap_err();
                assert_eq!(found, expected, "{input:?} in chunks of {chunk}");
            }
        }
    }

    #[test]
    fn garbage_stops_the_read_at_once_and_big_values_at_the_limit() {
        let mut zeros = crate::input::Bounded::new(
            io::repeat(0),
            crate::input::Limit::new(1 << 30, "for the test"),
        );
        let mut scanner = Scanner::new(&mut zeros, 1 << 20);
        assert!(matches!(scanner.object_start(), Ok(false)));
        assert!(matches!(scanner.value(), Err(ScanError::Syntax { .. })));
        drop(scanner);
        assert!(zeros.bytes_read() <= BUFFER as u64);

        // A string that never ends.
        let endless = io::Read::chain(&b"{\"a\": \"x"[..], io::repeat(b'x'));
        let mut scanner = Scanner::new(endless, 1 << 20);
        assert!(scanner.object_start().unwrap());
        assert_eq!(scanner.next_key(true).unwrap().as_deref(), Some("a"));
        let error = scanner.value().unwrap_err();
        assert!(
            matches!(error, ScanError::TooLarge { at: Position { line: 1, before: 6 }, limit } if limit == 1 << 20),
            "{error:?}"
        );
        // Nesting past serde's limit stops at once.
        let deep = io::Read::chain(&b"{\"a\": "[..], io::repeat(b'['));
        let mut scanner = Scanner::new(deep, 1 << 20);
        scanner.object_start().unwrap();
        scanner.next_key(true).unwrap();
        let ScanError::Syntax { message, .. } = scanner.value().unwrap_err() else {
            panic!("expected a syntax error");
        };
        assert_eq!(message, "recursion limit exceeded");
    }
}
