//! GPT-2's byte-level alphabet: every byte is written as one printable char in the
//! vocabulary (space is `Ġ`, newline `Ċ`), so token texts must be mapped back to bytes.

/// For each byte, the char that stands for it in a byte-level vocabulary
/// (GPT-2's `bytes_to_unicode`).
fn byte_to_char() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut extra = 0u32;
    for b in 0..=255u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        table[b as usize] = if printable {
            char::from(b)
        } else {
            extra += 1;
            char::from_u32(255 + extra).expect("256..=323 are valid chars")
        };
    }
    table
}

/// Maps byte-level chars back to bytes.
pub(crate) struct ByteDecoder {
    /// Indexed by `char as u32`; the alphabet lives below U+0144, so a small table works.
    byte_of: Vec<Option<u8>>,
}

impl ByteDecoder {
    pub(crate) fn new() -> Self {
        let mut byte_of = vec![None; 0x144];
        for (b, c) in byte_to_char().iter().enumerate() {
            byte_of[*c as usize] = Some(b as u8);
        }
        ByteDecoder { byte_of }
    }

    fn byte(&self, c: char) -> Option<u8> {
        self.byte_of.get(c as usize).copied().flatten()
    }

    /// The bytes `text` stands for, or `None` if some char is outside the alphabet (then
    /// the token is not byte-level text, e.g. a user-defined token stored verbatim).
    pub(crate) fn decode(&self, text: &str) -> Option<Vec<u8>> {
        text.chars().map(|c| self.byte(c)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_chars_map_back_to_their_bytes() {
        let d = ByteDecoder::new();
        assert_eq!(d.decode("Ġthe").unwrap(), b" the");
        assert_eq!(d.decode("Ċ").unwrap(), b"\n");
        // "é" in UTF-8 is C3 A9, written as "Ã" "©" in the byte-level alphabet.
        assert_eq!(d.decode("Ã©").unwrap(), "é".as_bytes());
        assert_eq!(d.decode("ĀĠ").unwrap(), [0u8, 32]);
        assert_eq!(d.decode("日"), None);
    }

    #[test]
    fn the_alphabet_is_a_bijection() {
        let table = byte_to_char();
        let mut seen = std::collections::HashSet::new();
        assert!(table.iter().all(|c| seen.insert(*c)));
        let d = ByteDecoder::new();
        for (b, c) in table.iter().enumerate() {
            assert_eq!(d.byte(*c), Some(b as u8));
        }
    }
}
