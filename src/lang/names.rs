//! Languages' names in other languages: the English and Chinese names the Hunyuan
//! translation models' cards give each language they translate, as their documented
//! prompts name a target.

/// (code, English name, Chinese name), lower-case codes, as the Hunyuan translation
/// models' cards list them.
pub const HY_MT_NAMES: &[(&str, &str, &str)] = &[
    ("zh", "Chinese", "中文"),
    ("zh-cn", "Chinese", "中文"),
    ("zh-hans", "Chinese", "中文"),
    ("zh-tw", "Traditional Chinese", "繁体中文"),
    ("zh-hant", "Traditional Chinese", "繁体中文"),
    ("yue", "Cantonese", "粤语"),
    ("en", "English", "英语"),
    ("fr", "French", "法语"),
    ("pt", "Portuguese", "葡萄牙语"),
    ("es", "Spanish", "西班牙语"),
    ("ja", "Japanese", "日语"),
    ("tr", "Turkish", "土耳其语"),
    ("ru", "Russian", "俄语"),
    ("ar", "Arabic", "阿拉伯语"),
    ("ko", "Korean", "韩语"),
    ("th", "Thai", "泰语"),
    ("it", "Italian", "意大利语"),
    ("de", "German", "德语"),
    ("vi", "Vietnamese", "越南语"),
    ("ms", "Malay", "马来语"),
    ("id", "Indonesian", "印尼语"),
    ("tl", "Filipino", "菲律宾语"),
    ("hi", "Hindi", "印地语"),
    ("pl", "Polish", "波兰语"),
    ("cs", "Czech", "捷克语"),
    ("nl", "Dutch", "荷兰语"),
    ("km", "Khmer", "高棉语"),
    ("my", "Burmese", "缅甸语"),
    ("fa", "Persian", "波斯语"),
    ("gu", "Gujarati", "古吉拉特语"),
    ("ur", "Urdu", "乌尔都语"),
    ("te", "Telugu", "泰卢固语"),
    ("mr", "Marathi", "马拉地语"),
    ("he", "Hebrew", "希伯来语"),
    ("bn", "Bengali", "孟加拉语"),
    ("ta", "Tamil", "泰米尔语"),
    ("uk", "Ukrainian", "乌克兰语"),
    ("bo", "Tibetan", "藏语"),
    ("kk", "Kazakh", "哈萨克语"),
    ("mn", "Mongolian", "蒙古语"),
    ("ug", "Uyghur", "维吾尔语"),
];

/// A language's English and Chinese names as the Hunyuan translation models' cards list
/// them (the code itself for one they do not list).
pub fn hy_mt_names(code: &str) -> (String, String) {
    let lower = code.to_ascii_lowercase();
    HY_MT_NAMES
        .iter()
        .find(|(c, _, _)| *c == lower)
        .map(|(_, en, zh)| (en.to_string(), zh.to_string()))
        .unwrap_or_else(|| (code.to_string(), code.to_string()))
}

/// Whether a code gets the Hunyuan translation models' Chinese instruction: Chinese
/// (`zh`, `zh-…`) or Cantonese (`yue`), in any case.
pub fn hy_mt_chinese(code: &str) -> bool {
    let l = code.to_ascii_lowercase();
    l == "zh" || l.starts_with("zh-") || l == "yue"
}
