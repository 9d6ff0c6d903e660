//! Reading the pages: escaping, SVG, term tokens and lane labels.

pub const XSS: &str = "<script>alert(1)</script>";
/// How askama escapes [`XSS`] (numeric character references; the same
/// text as `&lt;script&gt;…` to any HTML parser).
pub const XSS_ESCAPED: &str = "&#60;script&#62;alert(1)&#60;/script&#62;";

/// The page with askama's numeric references turned into the named ones
/// (`&#60;` → `&lt;`), so assertions can be written either way.
pub fn named_entities(body: &str) -> String {
    body.replace("&#60;", "&lt;")
        .replace("&#62;", "&gt;")
        .replace("&#38;", "&amp;")
        .replace("&#34;", "&quot;")
        .replace("&#39;", "&#x27;")
}

/// `data-token` of every `rect.term` in the page, in order.
pub fn term_tokens(body: &str) -> Vec<i64> {
    body.split("<rect class=\"term")
        .skip(1)
        .filter_map(|rest| {
            let v = rest.split("data-token=\"").nth(1)?;
            v.split('"').next()?.parse().ok()
        })
        .collect()
}

pub fn lane_labels(body: &str) -> Vec<String> {
    body.split("<text class=\"lane-label\"")
        .skip(1)
        .filter_map(|rest| {
            let after_title = rest.split("</title>").nth(1)?;
            Some(after_title.split("</text>").next()?.to_owned())
        })
        .collect()
}

pub fn svg(body: &str) -> &str {
    let start = body.find("<svg").expect("an <svg> in the page");
    let end = body[start..].find("</svg>").expect("</svg>") + start;
    &body[start..end]
}

pub fn svg_of(body: &str) -> &str {
    svg(body)
}
