//! A printable table with the formula that produced it underneath.

use serde::Serialize;
use std::fmt;

/// Rows of strings already rounded the way DESIGN.md rounds them, plus one line saying
/// which formula produced the numbers (so a reader can redo the arithmetic).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Table {
    pub title: String,
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
    pub explanation: String,
}

impl Table {
    pub fn new(title: impl Into<String>, headers: &[&str]) -> Self {
        Self {
            title: title.into(),
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
            explanation: String::new(),
        }
    }

    pub fn row(mut self, cells: Vec<String>) -> Self {
        self.rows.push(cells);
        self
    }

    pub fn push(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn explain(mut self, text: impl Into<String>) -> Self {
        self.explanation = text.into();
        self
    }

    /// The cell in the row whose first cell is `key`, under header `col` (for tests).
    pub fn cell(&self, key: &str, col: &str) -> Option<&str> {
        let c = self.headers.iter().position(|h| h == col)?;
        let r = self
            .rows
            .iter()
            .find(|r| r.first().map(String::as_str) == Some(key))?;
        r.get(c).map(String::as_str)
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ncol = self
            .rows
            .iter()
            .map(Vec::len)
            .chain([self.headers.len()])
            .max()
            .unwrap_or(0);
        let mut width = vec![0usize; ncol];
        for r in std::iter::once(&self.headers).chain(&self.rows) {
            for (i, c) in r.iter().enumerate() {
                width[i] = width[i].max(c.chars().count());
            }
        }
        writeln!(f, "{}", self.title)?;
        let line = |f: &mut fmt::Formatter<'_>, r: &[String]| -> fmt::Result {
            let mut s = String::from(" ");
            for (i, c) in r.iter().enumerate() {
                let pad = width[i] - c.chars().count();
                if i == 0 {
                    s.push_str(&format!(" {c}{}", " ".repeat(pad)));
                } else {
                    s.push_str(&format!("  {}{c}", " ".repeat(pad)));
                }
            }
            writeln!(f, "{}", s.trim_end())
        };
        line(f, &self.headers)?;
        let total: usize = width.iter().sum::<usize>() + 2 * ncol.saturating_sub(1) + 2;
        writeln!(f, "  {}", "-".repeat(total.saturating_sub(2)))?;
        for r in &self.rows {
            line(f, r)?;
        }
        if !self.explanation.is_empty() {
            writeln!(f, "  = {}", self.explanation)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_aligned_with_explanation() {
        let t = Table::new("T", &["a", "bb"])
            .row(vec!["x".into(), "1".into()])
            .row(vec!["yyy".into(), "22".into()])
            .explain("f = g");
        let s = t.to_string();
        assert!(s.contains("  x     1\n"), "{s}");
        assert!(s.contains("  yyy  22\n"), "{s}");
        assert!(s.ends_with("  = f = g\n"), "{s}");
        assert_eq!(t.cell("yyy", "bb"), Some("22"));
    }
}
