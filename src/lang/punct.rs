//! Punctuation of East Asian text, script-wide (whatever the target language): the
//! full-width marks Chinese and Japanese write, which generic code recognises in any text
//! (sentence ends, brackets) and writes into CJK text (parentheses around a gloss).
//! What one language writes in its own sentences (its clause marks, full stop, quotation
//! marks) is its [`super::Profile`]'s.

/// `。`, the ideographic full stop.
pub const IDEOGRAPHIC_FULL_STOP: char = '。';
/// `！`.
pub const FULLWIDTH_EXCLAMATION: char = '！';
/// `？`.
pub const FULLWIDTH_QUESTION: char = '？';
/// `，`.
pub const FULLWIDTH_COMMA: char = '，';
/// `：`.
pub const FULLWIDTH_COLON: char = '：';
/// `；`.
pub const FULLWIDTH_SEMICOLON: char = '；';
/// `（`.
pub const FULLWIDTH_LEFT_PAREN: char = '（';
/// `）`.
pub const FULLWIDTH_RIGHT_PAREN: char = '）';
/// `」`, a closing corner bracket (the Japanese quotation mark).
pub const RIGHT_CORNER_BRACKET: char = '」';
/// `』`, a closing white corner bracket (a quotation inside a quotation).
pub const RIGHT_WHITE_CORNER_BRACKET: char = '』';

/// The full-width curly braces, `｛` and `｝`: a small model's placeholder braces.
pub const FULLWIDTH_BRACES: [&str; 2] = ["｛", "｝"];

/// The marks that end a sentence of CJK text without a space after them: `。`, `！`, `？`.
pub const SENTENCE_ENDS: [char; 3] = [
    IDEOGRAPHIC_FULL_STOP,
    FULLWIDTH_EXCLAMATION,
    FULLWIDTH_QUESTION,
];

/// Bracket and quotation pairs whose balance the checks count in prose, each as its name
/// and its opening and closing marks (half-width and full-width forms together).
pub const BRACKET_PAIRS: [(&str, &[char], &[char]); 6] = [
    ("()", &['(', '（'], &[')', '）']),
    ("[]", &['[', '【'], &[']', '】']),
    ("“”", &['“'], &['”']),
    ("‘’", &['‘'], &['’']),
    ("「」", &['「', '『'], &['」', '』']),
    ("《》", &['《'], &['》']),
];

/// The quotation marks, emphasis and code markers and clause or sentence marks trimmed off
/// both ends of a one-term answer (half-width and full-width).
pub const TERM_WRAPPERS: &str = "\"'“”‘’「」《》`*。.,，;；";
