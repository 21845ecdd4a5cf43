//! The container (`META-INF/container.xml`), the DRM check (`META-INF/encryption.xml`)
//! and the package document (OPF): its manifest, spine, navigation document and NCX.

use super::xhtml::{self, Node, NodeKind};
use super::Files;
use anyhow::{bail, Context, Result};

/// One manifest item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestItem {
    /// The item's id.
    pub id: String,
    /// The path inside the zip (resolved against the OPF's folder).
    pub path: String,
    /// Its media type (`application/xhtml+xml`).
    pub media_type: String,
    /// Its `properties` (`nav`, `cover-image`…).
    pub properties: String,
}

/// The package document's facts Quire needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// The OPF's path inside the zip.
    pub opf_path: String,
    /// The package `version` attribute (`2.0`, `3.0`).
    pub version: String,
    /// The manifest's items, in order.
    pub items: Vec<ManifestItem>,
    /// The spine's item ids, in reading order.
    pub spine: Vec<String>,
    /// The NCX's id named by the spine's `toc` attribute (EPUB 2), if any.
    pub spine_toc: Option<String>,
}

/// Font obfuscation (IDPF and Adobe) is not DRM: fonts are copied as they are.
const FONT_OBFUSCATION: &[&str] = &[
    "http://www.idpf.org/2008/embedding",
    "http://ns.adobe.com/pdf/enc#RC",
];

impl Manifest {
    /// The paths of the spine's XHTML documents, in reading order, each once.
    pub fn spine_documents(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for idref in &self.spine {
            if let Some(item) = self.items.iter().find(|i| &i.id == idref) {
                let xhtml =
                    item.media_type == "application/xhtml+xml" || item.media_type == "text/html";
                if xhtml && !out.contains(&item.path) {
                    out.push(item.path.clone());
                }
            }
        }
        out
    }

    /// The EPUB 3 navigation document.
    pub fn nav(&self) -> Option<&ManifestItem> {
        self.items
            .iter()
            .find(|i| i.properties.split_whitespace().any(|p| p == "nav"))
    }

    /// The EPUB 2 NCX.
    pub fn ncx(&self) -> Option<&ManifestItem> {
        self.spine_toc
            .as_ref()
            .and_then(|id| self.items.iter().find(|i| &i.id == id))
            .or_else(|| {
                self.items
                    .iter()
                    .find(|i| i.media_type == "application/x-dtbncx+xml")
            })
    }

    /// Whether the package is EPUB 3 (or later).
    pub fn is_epub3(&self) -> bool {
        !self.version.starts_with('2') && !self.version.starts_with('1')
    }
}

/// An attribute of a start tag, unescaped.
pub(super) fn attr(node: &Node, doc: &str, name: &str) -> Option<String> {
    let tag = node.start_tag(doc);
    let body = tag
        .trim_start_matches('<')
        .trim_end_matches('>')
        .trim_end_matches('/');
    let start = quick_xml::events::BytesStart::from_content(
        body,
        body.find(char::is_whitespace).unwrap_or(body.len()),
    );
    start
        .attributes()
        .flatten()
        .find(|a| a.key.as_ref() == name)
        .and_then(|a| {
            a.normalized_value(quick_xml::XmlVersion::Implicit1_0)
                .ok()
                .map(|v| v.into_owned())
        })
}

/// Every element named `name` under `nodes`, depth first.
pub(super) fn all<'a>(nodes: &'a [Node], name: &str, out: &mut Vec<&'a Node>) {
    for n in nodes {
        if n.name() == Some(name) {
            out.push(n);
        }
        all(n.children(), name, out);
    }
}

/// `href` (percent-encoded, relative to `base`'s folder) as a path inside the zip.
pub fn resolve(base: &str, href: &str) -> String {
    let href = href.split('#').next().unwrap_or("");
    let decoded = percent_decode(href);
    let mut parts: Vec<&str> = match base.rfind('/') {
        Some(i) => base[..i].split('/').collect(),
        None => Vec::new(),
    };
    for seg in decoded.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            s => parts.push(s),
        }
    }
    parts.join("/")
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            if let Some(Ok(b)) = s.get(i + 1..i + 3).map(|h| u8::from_str_radix(h, 16)) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Read the container, refuse DRM, and read the package document.
pub(super) fn read(files: &Files) -> Result<Manifest> {
    const CONTAINER: &str = "META-INF/container.xml";
    if !files.has(CONTAINER) {
        bail!("{CONTAINER} is missing: not an EPUB (or a damaged one); re-export it from the tool that made it");
    }
    check_encryption(files)?;
    let container = files.text(CONTAINER)?;
    let nodes = xhtml::parse_named(CONTAINER, &container)?;
    let mut rootfiles = Vec::new();
    all(&nodes, "rootfile", &mut rootfiles);
    let opf_path = rootfiles
        .iter()
        .find(|r| attr(r, &container, "media-type").as_deref() != Some("application/pdf"))
        .and_then(|r| attr(r, &container, "full-path"))
        .with_context(|| format!("{CONTAINER}: names no package document (rootfile full-path)"))?;
    let opf = files
        .text(&opf_path)
        .with_context(|| format!("{CONTAINER} names the package {opf_path}"))?;
    parse_opf(&opf_path, &opf)
}

/// Encrypted resources other than obfuscated fonts mean DRM: Quire cannot read them.
fn check_encryption(files: &Files) -> Result<()> {
    const ENCRYPTION: &str = "META-INF/encryption.xml";
    if !files.has(ENCRYPTION) {
        return Ok(());
    }
    let text = files.text(ENCRYPTION)?;
    let nodes = xhtml::parse_named(ENCRYPTION, &text)?;
    let mut data = Vec::new();
    all(&nodes, "encrypteddata", &mut data);
    for d in data {
        let mut methods = Vec::new();
        all(d.children(), "encryptionmethod", &mut methods);
        let font = methods.iter().any(|m| {
            attr(m, &text, "Algorithm").is_some_and(|a| FONT_OBFUSCATION.contains(&a.as_str()))
        });
        if !font {
            let mut refs = Vec::new();
            all(d.children(), "cipherreference", &mut refs);
            let what = refs
                .first()
                .and_then(|r| attr(r, &text, "URI"))
                .unwrap_or_else(|| "a resource".into());
            bail!(
                "{ENCRYPTION}: {what} is encrypted (DRM): Quire cannot read a DRM-protected book; \
                 translate a DRM-free copy from the publisher"
            );
        }
    }
    Ok(())
}

fn parse_opf(opf_path: &str, opf: &str) -> Result<Manifest> {
    let nodes = xhtml::parse_named(opf_path, opf)?;
    let package = xhtml::find(&nodes, "package")
        .with_context(|| format!("{opf_path}: no <package> element: not a package document"))?;
    let version = attr(package, opf, "version").unwrap_or_else(|| "2.0".into());
    let mut item_nodes = Vec::new();
    all(package.children(), "item", &mut item_nodes);
    let mut items = Vec::new();
    for n in item_nodes {
        let (Some(id), Some(href)) = (attr(n, opf, "id"), attr(n, opf, "href")) else {
            bail!(
                "{opf_path}: line {}: a manifest <item> without id or href",
                xhtml::line_col(opf, n.range.start).0
            );
        };
        items.push(ManifestItem {
            id,
            path: resolve(opf_path, &href),
            media_type: attr(n, opf, "media-type").unwrap_or_default(),
            properties: attr(n, opf, "properties").unwrap_or_default(),
        });
    }
    let spine_node = xhtml::find(package.children(), "spine")
        .with_context(|| format!("{opf_path}: no <spine>: the reading order is missing"))?;
    let mut refs = Vec::new();
    all(spine_node.children(), "itemref", &mut refs);
    let spine = refs
        .iter()
        .filter_map(|r| attr(r, opf, "idref"))
        .collect::<Vec<_>>();
    if let Some(bad) = spine.iter().find(|id| !items.iter().any(|i| &i.id == *id)) {
        bail!("{opf_path}: the spine names {bad}, which is not in the manifest");
    }
    Ok(Manifest {
        opf_path: opf_path.to_string(),
        version,
        items,
        spine,
        spine_toc: attr(spine_node, opf, "toc"),
    })
}

/// The byte range of the text of the first element named `name` (its inner range).
pub(super) fn element_inner(doc: &str, name: &str) -> Option<std::ops::Range<usize>> {
    let nodes = xhtml::parse(doc).ok()?;
    let n = xhtml::find(&nodes, name)?;
    match n.kind {
        NodeKind::Element { .. } => Some(n.inner()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hrefs_resolve_against_the_package_folder() {
        assert_eq!(
            resolve("OEBPS/content.opf", "text/ch%201.xhtml"),
            "OEBPS/text/ch 1.xhtml"
        );
        assert_eq!(resolve("content.opf", "a.xhtml#x"), "a.xhtml");
        assert_eq!(resolve("A/B/p.opf", "../c.css"), "A/c.css");
    }
}
