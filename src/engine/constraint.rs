//! Constrained decoding: a rule on what a sequence may generate, applied as a logits mask
//! in the generation loop (single and batched decoding alike).
//!
//! A [`TextConstraint`] sees bytes: the bytes generated so far and the bytes one candidate
//! token would add. The sampler asks it lazily — the most likely token first, then the
//! next — so most steps ask about one token, not the whole vocabulary. For greedy
//! decoding this picks exactly the token a full mask would (after [`LAZY_TRIES`] refusals
//! the remaining tokens are sorted and asked in order); for sampling, the candidates of top-k/top-p are filtered before
//! the draw, which is the masked distribution. The constraint only changes which token is
//! chosen, never the forward pass, so prefix reuse and batching stay exact.

use std::fmt;
use std::sync::Arc;

/// Candidates checked one by one before the rest of the vocabulary is sorted.
pub const LAZY_TRIES: usize = 64;

/// What a sequence may generate.
pub trait TextConstraint: Send + Sync {
    /// Whether a token whose bytes are `next` may follow `text` (everything generated so far).
    fn allows(&self, text: &[u8], next: &[u8]) -> bool;
    /// Whether the sequence may end (end-of-sequence token) after `text`.
    fn allows_end(&self, text: &[u8]) -> bool;
    /// Bytes `text` still owes where it stands (a placeholder its line has not written):
    /// when the model's most likely token would end the text or its line there and may
    /// not, the next token must begin writing them — the model is steered back to what it
    /// skipped instead of being pushed on into text it has no more to say in. `None`:
    /// nothing owed.
    fn owed(&self, _text: &[u8]) -> Option<Vec<u8>> {
        None
    }
    /// A JSON description from which a server can rebuild this constraint (so that a
    /// request sent to `quire serve` is decoded under the same rule); `None` when it cannot
    /// travel.
    fn spec(&self) -> Option<serde_json::Value> {
        None
    }
}

/// A shared constraint carried in [`super::generate::GenerationParams`]. Two handles are
/// equal when they are the same constraint object.
#[derive(Clone)]
pub struct Constraint(pub Arc<dyn TextConstraint>);

impl Constraint {
    /// Wrap a constraint.
    pub fn new(c: impl TextConstraint + 'static) -> Self {
        Self(Arc::new(c))
    }

    /// The constraint's description for a server ([`TextConstraint::spec`]).
    pub fn spec(&self) -> Option<serde_json::Value> {
        self.0.spec()
    }
}

impl fmt::Debug for Constraint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Constraint")
    }
}

impl PartialEq for Constraint {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// The bytes each token id stands for (byte-level BPE pieces decoded through the GPT-2
/// byte table, `<0xNN>` byte tokens, `▁` as a space), so constraints can judge a token
/// before it is decoded. `sentencepiece`: the vocabulary is SentencePiece's, whose pieces
/// are UTF-8 text (`▁` for a space, `<0xNN>` for a byte) and never go through the GPT-2
/// table (`é` is two bytes there, not the byte 0xE9).
pub fn token_bytes(tokenizer: &tokenizers::Tokenizer, sentencepiece: bool) -> Vec<Vec<u8>> {
    let n = tokenizer.get_vocab_size(true);
    let table = byte_decoder();
    (0..n as u32)
        .map(|id| {
            let Some(piece) = tokenizer.id_to_token(id) else {
                return Vec::new();
            };
            if let Some(b) = piece
                .strip_prefix("<0x")
                .and_then(|h| h.strip_suffix('>'))
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                return vec![b];
            }
            if sentencepiece {
                return piece.replace('\u{2581}', " ").into_bytes();
            }
            let mapped: Option<Vec<u8>> = piece.chars().map(|c| table.get(&c).copied()).collect();
            mapped.unwrap_or_else(|| piece.replace('\u{2581}', " ").into_bytes())
        })
        .collect()
}

/// The inverse of GPT-2's byte → printable-character table used by byte-level BPE.
fn byte_decoder() -> std::collections::HashMap<char, u8> {
    let mut map = std::collections::HashMap::with_capacity(256);
    let mut extra = 0u32;
    for b in 0..=255u8 {
        let printable = (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
        let c = if printable {
            char::from(b)
        } else {
            extra += 1;
            char::from_u32(255 + extra).expect("valid char")
        };
        map.insert(c, b);
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentencepiece_pieces_are_utf8_text() {
        let tokens: Vec<String> = ["<unk>", "<0x0A>", "\u{2581}café", "é", "<end_of_turn>"]
            .iter()
            .map(|t| t.to_string())
            .collect();
        let t = crate::engine::tokenizer::spm_tokenizer(
            &tokens,
            &[0.0, 0.0, -1.0, -2.0, 0.0],
            &[2, 6, 1, 1, 3],
            false,
            Some(0),
        )
        .unwrap();
        let bytes = token_bytes(&t, true);
        assert_eq!(bytes[1], b"\n");
        assert_eq!(bytes[2], " café".as_bytes());
        assert_eq!(bytes[3], "é".as_bytes());
        assert_eq!(bytes[4], b"<end_of_turn>");
        // Read as byte-level BPE, "é" would be the single byte 0xE9.
        assert_eq!(token_bytes(&t, false)[3], [0xE9]);
    }

    #[test]
    fn byte_table_round_trips_all_bytes() {
        let map = byte_decoder();
        assert_eq!(map.len(), 256);
        assert_eq!(map[&'Ġ'], b' ');
        assert_eq!(map[&'Ċ'], b'\n');
        assert_eq!(map[&'a'], b'a');
    }
}
