//! GBNF (llama.cpp's grammar format) to llguidance's Lark syntax.
//!
//! GBNF: `name ::= alternatives`, `"literals"`, `[character classes]` (`[^…]` negated),
//! `.`, rule references, `( … )`, postfix `*` `+` `?` and `{m}` `{m,}` `{m,n}`, `#`
//! comments; a rule may span lines. Every rule `name` becomes the Lark rule `g_name`
//! (Lark rule names are lower case), literals become JSON-quoted strings, classes and `.`
//! become regexes with each character written `\x{…}`, and `start: g_root` is added.

/// A GBNF grammar folio could not read: the message names the line and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct GbnfError(pub String);

impl GbnfError {
    /// Whether the message contains `s` (tests and callers that match on a phrase).
    pub fn contains(&self, s: &str) -> bool {
        self.0.contains(s)
    }
}

/// Converts a GBNF grammar; the error names the line and what was wrong.
pub fn gbnf_to_lark(src: &str) -> Result<String, GbnfError> {
    convert(src).map_err(GbnfError)
}

fn convert(src: &str) -> Result<String, String> {
    let toks = lex(src)?;
    let mut rules: Vec<(String, Vec<String>)> = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        match (&toks[i].1, toks.get(i + 1).map(|t| &t.1)) {
            (Tok::Name(n), Some(Tok::Defines)) => {
                rules.push((n.clone(), Vec::new()));
                i += 2;
            }
            (t, _) => {
                let Some((_, body)) = rules.last_mut() else {
                    return Err(format!(
                        "line {}: expected `name ::=` to start a rule, got {}",
                        toks[i].0,
                        t.show()
                    ));
                };
                body.push(t.lark()?);
                i += 1;
            }
        }
    }
    if !rules.iter().any(|(n, _)| n == "root") {
        return Err("no `root` rule (generation starts at root)".into());
    }
    let mut out = String::from("start: g_root\n");
    for (name, body) in &rules {
        if body.is_empty() {
            return Err(format!("rule `{name}` is empty"));
        }
        out.push_str(&rule_name(name));
        out.push_str(": ");
        out.push_str(&body.join(" "));
        out.push('\n');
    }
    Ok(out)
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Name(String),
    Defines,
    /// A literal's decoded text.
    Literal(String),
    /// A class's items (single characters as (c, c)) and whether it is negated.
    Class(Vec<(char, char)>, bool),
    Any,
    /// `(`, `)`, `|`, `*`, `+`, `?`, or a `{m,n}` repetition, copied as is.
    Punct(String),
}

impl Tok {
    fn show(&self) -> String {
        match self {
            Tok::Name(n) => format!("`{n}`"),
            Tok::Defines => "`::=`".into(),
            Tok::Literal(s) => format!("{s:?}"),
            Tok::Class(..) => "a character class".into(),
            Tok::Any => "`.`".into(),
            Tok::Punct(p) => format!("`{p}`"),
        }
    }

    fn lark(&self) -> Result<String, String> {
        Ok(match self {
            Tok::Name(n) => rule_name(n),
            Tok::Defines => return Err("unexpected `::=`".into()),
            Tok::Literal(s) => serde_json::to_string(s).expect("a string serializes"),
            Tok::Class(items, neg) => {
                let mut r = String::from("/[");
                if *neg {
                    r.push('^');
                }
                for &(a, b) in items {
                    r.push_str(&format!("\\x{{{:x}}}", a as u32));
                    if b != a {
                        r.push_str(&format!("-\\x{{{:x}}}", b as u32));
                    }
                }
                r.push_str("]/");
                r
            }
            Tok::Any => "/(?s:.)/".into(),
            Tok::Punct(p) => p.clone(),
        })
    }
}

/// `g_` + the name, lower case (`A` becomes `_a`); `-` and digits are kept.
fn rule_name(n: &str) -> String {
    let mut s = String::from("g_");
    for c in n.chars() {
        if c.is_ascii_uppercase() {
            s.push('_');
            s.push(c.to_ascii_lowercase());
        } else {
            s.push(c);
        }
    }
    s
}

fn lex(src: &str) -> Result<Vec<(usize, Tok)>, String> {
    let cs: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let mut line = 1;
    while i < cs.len() {
        let c = cs[i];
        match c {
            '\n' => {
                line += 1;
                i += 1;
            }
            c if c.is_whitespace() => i += 1,
            '#' => {
                while i < cs.len() && cs[i] != '\n' {
                    i += 1;
                }
            }
            ':' => {
                if cs.get(i + 1) == Some(&':') && cs.get(i + 2) == Some(&'=') {
                    out.push((line, Tok::Defines));
                    i += 3;
                } else {
                    return Err(format!("line {line}: expected `::=`"));
                }
            }
            '"' => {
                i += 1;
                let mut s = String::new();
                loop {
                    match cs.get(i) {
                        None | Some('\n') => {
                            return Err(format!("line {line}: unterminated string"))
                        }
                        Some('"') => {
                            i += 1;
                            break;
                        }
                        Some('\\') => {
                            let (ch, n) = escape(&cs[i..], line)?;
                            s.push(ch);
                            i += n;
                        }
                        Some(&ch) => {
                            s.push(ch);
                            i += 1;
                        }
                    }
                }
                out.push((line, Tok::Literal(s)));
            }
            '[' => {
                i += 1;
                let neg = cs.get(i) == Some(&'^');
                if neg {
                    i += 1;
                }
                let mut items = Vec::new();
                loop {
                    let a = match cs.get(i) {
                        None => return Err(format!("line {line}: unterminated character class")),
                        Some(']') => {
                            i += 1;
                            break;
                        }
                        Some('\\') => {
                            let (ch, n) = escape(&cs[i..], line)?;
                            i += n;
                            ch
                        }
                        Some(&ch) => {
                            i += 1;
                            ch
                        }
                    };
                    let mut b = a;
                    if cs.get(i) == Some(&'-') && cs.get(i + 1).is_some_and(|&x| x != ']') {
                        i += 1;
                        b = match cs[i] {
                            '\\' => {
                                let (ch, n) = escape(&cs[i..], line)?;
                                i += n;
                                ch
                            }
                            ch => {
                                i += 1;
                                ch
                            }
                        };
                        if b < a {
                            return Err(format!("line {line}: class range {a:?}-{b:?} is empty"));
                        }
                    }
                    items.push((a, b));
                }
                if items.is_empty() {
                    return Err(format!("line {line}: empty character class"));
                }
                out.push((line, Tok::Class(items, neg)));
            }
            '.' => {
                out.push((line, Tok::Any));
                i += 1;
            }
            '(' | ')' | '|' | '*' | '+' | '?' => {
                out.push((line, Tok::Punct(c.to_string())));
                i += 1;
            }
            '{' => {
                let start = i;
                while i < cs.len() && cs[i] != '}' {
                    i += 1;
                }
                let inner: String = cs[start + 1..i.min(cs.len())].iter().collect();
                let inner: String = inner.chars().filter(|c| !c.is_whitespace()).collect();
                let ok = !inner.is_empty()
                    && inner.chars().all(|c| c.is_ascii_digit() || c == ',')
                    && inner.matches(',').count() <= 1;
                if i >= cs.len() || !ok {
                    return Err(format!("line {line}: bad repetition {{{inner}}}"));
                }
                i += 1;
                // Lark wants the lower bound: `{,n}` is `{0,n}`.
                let inner = if inner.starts_with(',') {
                    format!("0{inner}")
                } else {
                    inner
                };
                out.push((line, Tok::Punct(format!("{{{inner}}}"))));
            }
            c if c.is_ascii_alphanumeric() || c == '-' || c == '_' => {
                let start = i;
                while i < cs.len()
                    && (cs[i].is_ascii_alphanumeric() || cs[i] == '-' || cs[i] == '_')
                {
                    i += 1;
                }
                out.push((line, Tok::Name(cs[start..i].iter().collect())));
            }
            other => return Err(format!("line {line}: unexpected character {other:?}")),
        }
    }
    Ok(out)
}

/// The character of the escape at `s[0] == '\\'` and how many chars it spans.
fn escape(s: &[char], line: usize) -> Result<(char, usize), String> {
    let hex = |n: usize| -> Result<(char, usize), String> {
        let h: String = s.get(2..2 + n).unwrap_or(&[]).iter().collect();
        u32::from_str_radix(&h, 16)
            .ok()
            .filter(|_| h.len() == n)
            .and_then(char::from_u32)
            .map(|c| (c, 2 + n))
            .ok_or_else(|| format!("line {line}: bad escape \\{}{h}", s[1]))
    };
    match s.get(1) {
        Some('n') => Ok(('\n', 2)),
        Some('r') => Ok(('\r', 2)),
        Some('t') => Ok(('\t', 2)),
        Some('x') => hex(2),
        Some('u') => hex(4),
        Some('U') => hex(8),
        Some(&c) => Ok((c, 2)),
        None => Err(format!("line {line}: escape at end of input")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_literals_classes_and_repetitions() {
        let g = r#"
            # a comment
            root ::= greeting " " name{1,3} ("!" | "?")
            greeting ::= "hi" | "hello\n"
            name ::= [A-Z] [a-z\-]* .
        "#;
        let l = gbnf_to_lark(g).unwrap();
        assert_eq!(
            l,
            "start: g_root\n\
             g_root: g_greeting \" \" g_name {1,3} ( \"!\" | \"?\" )\n\
             g_greeting: \"hi\" | \"hello\\n\"\n\
             g_name: /[\\x{41}-\\x{5a}]/ /[\\x{61}-\\x{7a}\\x{2d}]/ * /(?s:.)/\n"
        );
    }

    #[test]
    fn multi_line_rules_and_errors() {
        let g = "root ::=\n  \"{\" (\n  item\n  )? \"}\"\nitem ::= [^\"]+";
        assert!(gbnf_to_lark(g).unwrap().contains("g_item: /[^\\x{22}]/ +"));
        assert!(gbnf_to_lark("item ::= \"x\"").unwrap_err().contains("root"));
        assert!(gbnf_to_lark("root ::= \"x").unwrap_err().contains("line 1"));
        assert!(gbnf_to_lark("\"x\"").unwrap_err().contains("::="));
    }
}
