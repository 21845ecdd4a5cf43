//! Chinese: its numerals ([`numerals`]), the characters that tell its two written
//! standards apart, and the mark of an unreviewed term.

pub mod numerals;

/// Characters used only in Traditional Chinese (their simplified forms differ).
pub const TRADITIONAL_ONLY: &str = "們這個說對時為來會學國與進還過發經問體處應據裡實現並關種後點務區開長從無頭義見當樣於業機電話讓麼邊寫讀識計記設語錯間隨題類檔數據庫網絡軟體憶記錄結構資訊術";
/// Characters used only in Simplified Chinese.
pub const SIMPLIFIED_ONLY: &str = "们这个说对时为来会学国与进还过发经问体处应实现并关种点务区开长从无头义见当样业机电话让么边写读识计记设语错间随题类档数库网络软忆录结构资讯术";

/// The mark of a term not yet reviewed ("to be reviewed"), which a model may copy from the
/// glossary into an answer.
pub const REVIEW_MARK: &str = "[待审]";
