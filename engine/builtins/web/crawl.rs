//! Built-in web.crawl: a polite, bounded crawl of one site into a snapshot folder.
//!
//! The page set comes from the site's sitemap or from an explicit page list. The sitemap is the
//! one named, else the first of `<url>/sitemap.xml`, `<url>/sitemap_index.xml`, the `Sitemap:`
//! lines of robots.txt and the origin's `/sitemap.xml` that answers with a sitemap; a sitemap
//! index is followed one level (an index inside an index is a warning, not followed). Only pages
//! of the site's own origin are fetched, redirects included, and no link is followed beyond the
//! page set; include/exclude globs over the URL path and robots.txt (the group for `stagegraph`,
//! else `*`; longest match wins, Allow on a tie) filter them, the budget caps how many are
//! fetched, and robots.txt's Crawl-delay (at most 10 s; a longer one is a warning) is waited
//! between two fetches. Each fetched page becomes one Markdown file with a frontmatter
//! (`source_url`, `crawl_date`, plus the given fields); an empty page, or one with no text once
//! its markup is gone (a page rendered by JavaScript), is a failure, as is one whose elements
//! nest deeper than a browser's parser would build (512). `_crawl-manifest.json`
//! lists the pages (url, file, content_hash of the body, bytes), the failures (url, reason,
//! occurred_at), the robots disallows, how many pages the budget cut, and the warnings.
//!
//! The crawl id is derived from the page set alone: the SHA-256 of the sorted page urls, one a
//! line, followed by their content hashes in that order, one a line; its first 8 hex digits. So
//! an unchanged site crawls to the same id. The snapshot is built in a temporary sibling and
//! renamed to `to` with `{crawl_id}` filled in; when that folder already exists the new copy is
//! discarded and the old one left as it was (`existing: true`).

use std::collections::BTreeSet;
use std::fs;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::LazyLock;
use std::time::Duration;

use htmd::element_handler::{HandlerResult, Handlers};
use htmd::Element;
use markup5ever_rcdom::{Node, NodeData};
use regex::Regex;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use url::Url;

use crate::builtins::args::{self, parse};
use crate::builtins::io_error;
use crate::builtins::paths::sha256_hex;
use crate::builtins::schema::value_schema;
use crate::builtins::{Builtin, BuiltinCtx, BuiltinError, BuiltinResult, Cancel};
use crate::template::functions::parse_duration;

const MANIFEST: &str = "_crawl-manifest.json";
const AGENT: &str = "stagegraph";
const MAX_PAGE_BYTES: u64 = 10 * 1024 * 1024;
/// The longest Crawl-delay honoured; a longer one is capped, with a warning.
const MAX_CRAWL_DELAY: Duration = Duration::from_secs(10);

pub(crate) fn builtins() -> Vec<Builtin> {
    vec![Builtin {
        name: "web.crawl",
        description: "Crawl a site (sitemap or page list, robots.txt, budget) into a snapshot folder of Markdown pages (each page's main content, where it marks one) with a manifest.",
        writes: true,
        with_schema: args::schema::<Args>,
        with_parse: args::parses::<Args>,
        output_schema,
        run: crawl,
    }]
}

/// Crawl one site into a snapshot folder.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// The site's root url; its origin bounds the crawl.
    #[schemars(regex(pattern = r"^[Hh][Tt][Tt][Pp][Ss]?://"))]
    url: String,
    /// Where the page set comes from.
    #[serde(default)]
    mode: Mode,
    /// sitemap mode: the sitemap to read (default: robots.txt's Sitemap lines, else /sitemap.xml).
    sitemap_url: Option<String>,
    /// list mode: the pages, in order.
    page_list: Option<Vec<String>>,
    /// Globs over the url path a page must match one of (default `/**`).
    include: Option<Vec<String>>,
    /// Globs over the url path that leave a page out.
    exclude: Option<Vec<String>>,
    /// The most pages fetched.
    #[serde(default = "default_budget")]
    #[schemars(range(min = 1, max = 5000))]
    budget: u64,
    /// The snapshot folder; `{crawl_id}` in it is replaced by the crawl id.
    #[schemars(length(min = 1))]
    to: String,
    /// Recorded as `source_id` in the manifest.
    #[serde(default)]
    id: String,
    /// Recorded as the crawl date in the manifest and every page's frontmatter.
    #[schemars(length(min = 1))]
    crawl_date: String,
    /// More frontmatter fields for every page (string, number or boolean values).
    #[serde(default)]
    frontmatter: Map<String, Value>,
    /// Each request's time limit.
    #[serde(default = "default_timeout")]
    #[schemars(regex(pattern = r"^([0-9]+(w|d|h|m|s|ms))+$"))]
    timeout: String,
}

/// Where the page set comes from.
#[derive(Default, PartialEq, serde::Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(transform = args::enum_only)]
enum Mode {
    #[default]
    Sitemap,
    List,
}

fn default_budget() -> u64 {
    200
}
fn default_timeout() -> String {
    "15s".into()
}

fn output_schema() -> Value {
    value_schema(json!({
        "description": "The snapshot's manifest, where it is, and whether it was already there.",
        "type": "object",
        "properties": {
            "path": { "type": "string", "description": "The snapshot folder." },
            "existing": { "type": "boolean", "description": "True when a snapshot of this crawl id was already there (and was kept as it was)." },
            "manifest": {
                "type": "object",
                "description": "What `_crawl-manifest.json` holds: source_id, crawl_id, crawl_date, sitemap_source, pages (url, file, content_hash, bytes), failures (url, reason), robots_disallows, budget_truncated.",
                "properties": {
                    "crawl_id": { "type": "string", "description": "8 hex digits derived from the page set." },
                    "pages": { "type": "array", "description": "The pages written." },
                },
                "required": ["crawl_id", "pages"],
            },
        },
        "required": ["path", "existing", "manifest"],
        "additionalProperties": false,
        "examples": [{ "path": "/cache/web-doc/site-0a1b2c3d", "existing": false, "manifest": { "crawl_id": "0a1b2c3d", "pages": [] } }],
    }))
}

fn fail(message: impl std::fmt::Display) -> BuiltinError {
    BuiltinError::new(format!("web.crawl: {message}"))
}

struct Client {
    agent: ureq::Agent,
    /// Each request is waited for with this handle checked, on a thread of its own.
    cancel: Cancel,
}

/// One answer: status, final url, body text.
struct Answer {
    status: u16,
    url: Url,
    body: String,
    html: bool,
}

impl Client {
    fn new(timeout: Duration, cancel: Cancel) -> Client {
        let agent = ureq::Agent::config_builder()
            .max_redirects(0)
            .http_status_as_error(false)
            .timeout_global(Some(timeout))
            .user_agent(AGENT)
            .build()
            .into();
        Client { agent, cancel }
    }

    /// GET with redirects followed within `origin` (at most 5). The requests run on a thread
    /// of their own, so an interrupt or the stage's deadline ends the wait for one at once (the
    /// crawl then stops at its next check); the request itself ends at its timeout, unheard.
    fn get(&self, url: &Url, origin: &url::Origin) -> Result<Answer, String> {
        let (agent, url, origin) = (self.agent.clone(), url.clone(), origin.clone());
        self.cancel
            .wait_for(move || fetch(&agent, &url, &origin))
            .map_err(|error| error.to_string())?
    }
}

/// The requests of [`Client::get`], made on the thread it waits for.
fn fetch(agent: &ureq::Agent, url: &Url, origin: &url::Origin) -> Result<Answer, String> {
    let mut at = url.clone();
    for _ in 0..6 {
        let mut response = agent.get(at.as_str()).call().map_err(|err| match err {
            ureq::Error::Timeout(_) => "timed out".to_string(),
            ureq::Error::ConnectionFailed | ureq::Error::Io(_) => "connection failed".to_string(),
            ureq::Error::HostNotFound => "host not found".to_string(),
            other => other.to_string(),
        })?;
        let status = response.status().as_u16();
        if (300..400).contains(&status) {
            let location = response
                .headers()
                .get("location")
                .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
                .ok_or_else(|| format!("HTTP {status} without a Location"))?;
            let next = at
                .join(&location)
                .map_err(|err| format!("bad Location `{location}`: {err}"))?;
            if &next.origin() != origin {
                return Err(format!("HTTP {status} to another origin ({next})"));
            }
            at = next;
            continue;
        }
        let html = response.headers().get("content-type").is_some_and(|value| {
            String::from_utf8_lossy(value.as_bytes())
                .to_ascii_lowercase()
                .contains("html")
        });
        let bytes = response
            .body_mut()
            .with_config()
            .limit(MAX_PAGE_BYTES)
            .read_to_vec()
            .map_err(|err| err.to_string())?;
        return Ok(Answer {
            status,
            url: at,
            body: String::from_utf8_lossy(&bytes).into_owned(),
            html,
        });
    }
    Err("too many redirects".to_string())
}

/// One robots.txt rule: (allow, path pattern).
type Rule = (bool, String);

/// robots.txt rules of one group.
struct Robots {
    rules: Vec<Rule>,
    sitemaps: Vec<String>,
    /// The group's Crawl-delay, in seconds, as written.
    delay: Option<f64>,
}

impl Robots {
    fn parse(text: &str) -> Robots {
        // Groups: consecutive User-agent lines, then their rules.
        let mut groups: Vec<(Vec<String>, Vec<Rule>, Option<f64>)> = Vec::new();
        let mut sitemaps = Vec::new();
        let mut in_agents = false;
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or("").trim();
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let key = key.trim().to_ascii_lowercase();
            let value = value.trim().to_string();
            match key.as_str() {
                "user-agent" => {
                    if !in_agents {
                        groups.push((Vec::new(), Vec::new(), None));
                    }
                    in_agents = true;
                    if let Some(group) = groups.last_mut() {
                        group.0.push(value.to_ascii_lowercase());
                    }
                }
                "allow" | "disallow" => {
                    in_agents = false;
                    if let Some(group) = groups.last_mut() {
                        if !value.is_empty() {
                            group.1.push((key == "allow", value));
                        }
                    }
                }
                "sitemap" => sitemaps.push(value),
                "crawl-delay" => {
                    in_agents = false;
                    if let Some(group) = groups.last_mut() {
                        group.2 = value
                            .parse::<f64>()
                            .ok()
                            .filter(|d| d.is_finite() && *d >= 0.0);
                    }
                }
                _ => in_agents = false,
            }
        }
        let ours = groups
            .iter()
            .find(|(agents, _, _)| agents.iter().any(|a| a == AGENT));
        let any = groups
            .iter()
            .find(|(agents, _, _)| agents.iter().any(|a| a == "*"));
        let group = ours.or(any);
        let rules = group.map(|(_, rules, _)| rules.clone()).unwrap_or_default();
        let delay = group.and_then(|(_, _, delay)| *delay);
        Robots {
            rules,
            sitemaps,
            delay,
        }
    }

    fn disallows(&self) -> Vec<String> {
        self.rules
            .iter()
            .filter(|(allow, _)| !allow)
            .map(|(_, p)| p.clone())
            .collect()
    }

    fn allowed(&self, path: &str) -> bool {
        let mut best: Option<(usize, bool)> = None;
        for (allow, pattern) in &self.rules {
            if robots_match(pattern, path) {
                let len = pattern.len();
                best = match best {
                    Some((l, a)) if l > len || (l == len && a) => Some((l, a)),
                    _ => Some((len, *allow)),
                };
            }
        }
        best.is_none_or(|(_, allow)| allow)
    }
}

/// A robots.txt path pattern: a prefix, `*` any run of characters, a final `$` the end.
fn robots_match(pattern: &str, path: &str) -> bool {
    let (body, anchored) = match pattern.strip_suffix('$') {
        Some(body) => (body, true),
        None => (pattern, false),
    };
    let mut regex = String::from("^");
    for (i, part) in body.split('*').enumerate() {
        if i > 0 {
            regex.push_str(".*");
        }
        regex.push_str(&regex::escape(part));
    }
    if anchored {
        regex.push('$');
    }
    Regex::new(&regex).is_ok_and(|re| re.is_match(path))
}

fn glob_set(patterns: &[String]) -> Result<globset::GlobSet, BuiltinError> {
    let mut builder = globset::GlobSetBuilder::new();
    for pattern in patterns {
        let glob = globset::GlobBuilder::new(pattern)
            .literal_separator(true)
            .build()
            .map_err(|err| fail(format!("invalid glob `{pattern}`: {}", err.kind())))?;
        builder.add(glob);
    }
    builder.build().map_err(fail)
}

/// What a sitemap url answered.
enum Sitemap {
    /// Page urls (a urlset, or an index's sitemaps read).
    Pages(Vec<Url>),
    /// No sitemap there, and why.
    Missing(String),
}

/// The page urls of a sitemap; an index's sitemaps are read one level deep, and an index inside
/// an index is a warning.
fn sitemap_pages(
    client: &Client,
    origin: &url::Origin,
    url: &Url,
    nested: bool,
    failures: &mut Vec<Value>,
    warnings: &mut Vec<String>,
) -> Sitemap {
    let answer = match client.get(url, origin) {
        Ok(answer) if answer.status == 200 => answer,
        Ok(answer) => return Sitemap::Missing(format!("HTTP {}", answer.status)),
        Err(why) => return Sitemap::Missing(why),
    };
    let (index, locs) = match sitemap_locs(&answer.body) {
        Ok(read) => read,
        Err(why) => return Sitemap::Missing(why),
    };
    let mut out = Vec::new();
    for text in locs {
        let Ok(found) = answer.url.join(&text) else {
            continue;
        };
        if !index {
            out.push(found);
        } else if nested {
            warnings.push(format!(
                "{url} is a sitemap index inside a sitemap index; {found} was not read"
            ));
        } else if &found.origin() != origin {
            failures.push(json!({ "url": found.as_str(), "reason": "sitemap: another origin than the site's" }));
        } else {
            match sitemap_pages(client, origin, &found, true, failures, warnings) {
                Sitemap::Pages(pages) => out.extend(pages),
                Sitemap::Missing(why) => {
                    failures.push(
                        json!({ "url": found.as_str(), "reason": format!("sitemap: {why}") }),
                    );
                }
            }
        }
    }
    Sitemap::Pages(out)
}

/// A sitemap read as XML: whether it is an index (its `<loc>`s name sitemaps) rather than a
/// `<urlset>` (pages), and the text of each `<loc>`, trimmed, with entity and character
/// references decoded and CDATA taken as written; a namespace prefix on the tags is allowed. A
/// bare `&` (sitemaps in the wild have them in query strings) and a reference XML does not
/// define stay as written; what was read before a malformed part counts. `Err` says why it is
/// not a sitemap.
fn sitemap_locs(body: &str) -> Result<(bool, Vec<String>), String> {
    use quick_xml::events::Event;
    const NOT_ONE: &str = "not a sitemap (no <urlset> or <sitemapindex>)";
    let mut reader = quick_xml::Reader::from_str(body);
    let config = reader.config_mut();
    config.allow_dangling_amp = true;
    config.check_end_names = false;
    // `Some(true)` inside a sitemap index, `Some(false)` inside a urlset.
    let mut root: Option<bool> = None;
    let mut loc: Option<String> = None;
    let mut locs = Vec::new();
    loop {
        let event = match reader.read_event() {
            Ok(event) => event,
            Err(_) if root.is_some() => break,
            Err(error) => {
                return Err(format!(
                    "not a sitemap (at byte {}: {error})",
                    reader.error_position()
                ))
            }
        };
        match event {
            Event::Start(tag) | Event::Empty(tag) if root.is_none() => {
                root = match tag.local_name().as_ref() {
                    "urlset" => Some(false),
                    "sitemapindex" => Some(true),
                    _ => return Err(NOT_ONE.to_string()),
                };
            }
            Event::Start(tag) if tag.local_name().as_ref() == "loc" => loc = Some(String::new()),
            Event::End(tag) if tag.local_name().as_ref() == "loc" => {
                if let Some(text) = loc.take() {
                    locs.push(text.trim().to_string());
                }
            }
            Event::Text(text) => {
                if let Some(loc) = loc.as_mut() {
                    loc.push_str(&text.xml10_content());
                }
            }
            Event::CData(data) => {
                if let Some(loc) = loc.as_mut() {
                    loc.push_str(&data.xml10_content());
                }
            }
            Event::GeneralRef(reference) => {
                let Some(loc) = loc.as_mut() else { continue };
                match reference.resolve_char_ref() {
                    Ok(Some(char)) => loc.push(char),
                    _ => match quick_xml::escape::resolve_xml_entity(&reference) {
                        Some(text) => loc.push_str(text),
                        None => {
                            loc.push('&');
                            loc.push_str(&reference);
                            loc.push(';');
                        }
                    },
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    root.map(|index| (index, locs))
        .ok_or_else(|| NOT_ONE.to_string())
}

/// `name` inside the source url taken as a folder: `https://x/docs` and `https://x/docs/` give
/// `https://x/docs/<name>`.
fn under(site: &Url, name: &str) -> Option<Url> {
    let mut folder = site.clone();
    folder.set_query(None);
    folder.set_fragment(None);
    if !folder.path().ends_with('/') {
        let path = format!("{}/", folder.path());
        folder.set_path(&path);
    }
    folder.join(name).ok()
}

/// The deepest nesting of elements a page may have. The converter walks a page's tree by
/// recursion, and a page nested deeper than a thread's stack allows would abort the process;
/// browsers' parsers stop nesting at a few hundred levels (Blink at 512), so no page written
/// for people comes near it.
const MAX_DEPTH: usize = 512;

/// HTML to Markdown by htmd: ATX headings, fenced code blocks, `-` list items, inline links;
/// scripts, styles, the head, navigation and `<noscript>` dropped. A page that marks its main
/// content (a `<main>`, else an element of `role="main"`, neither `hidden`) gives that alone:
/// documentation sites wrap each page's text in one, and leave out of it the chrome around it
/// (menus, theme pickers, keyboard help) that would otherwise fill the snapshot. Trimmed, with
/// one closing newline, so a page whose text is all in dropped parts comes back as a bare
/// newline. `Err` says why a page is not converted: its elements nest deeper than
/// [`MAX_DEPTH`].
fn html_to_markdown(html: &str) -> Result<String, String> {
    // Built once: the converter holds a handler per tag, the same for every page.
    static CONVERTER: LazyLock<htmd::HtmlToMarkdown> = LazyLock::new(|| {
        let options = htmd::options::Options {
            heading_style: htmd::options::HeadingStyle::Atx,
            code_block_style: htmd::options::CodeBlockStyle::Fenced,
            code_block_fence: htmd::options::CodeBlockFence::Backticks,
            bullet_list_marker: htmd::options::BulletListMarker::Dash,
            ul_bullet_spacing: 1,
            ol_number_spacing: 1,
            ..htmd::options::Options::default()
        };
        htmd::HtmlToMarkdown::builder()
            .options(options)
            .skip_tags(vec!["script", "style", "head", "nav", "noscript"])
            .add_handler(vec!["pre"], preformatted)
            .build()
    });
    // html5ever reads any text into a tree, so the only error is an I/O one its in-memory sink
    // never raises; an empty page is then the honest answer, and the caller reports it.
    let Ok(tree) = CONVERTER.html_to_tree(html) else {
        return Ok("\n".to_string());
    };
    let depth = depth_of(&tree);
    if depth > MAX_DEPTH {
        return Err(format!(
            "its elements nest {depth} deep; at most {MAX_DEPTH} are converted"
        ));
    }
    // The converter walks from the document and reads each node's parent (a subtree walked
    // alone, or moved under another parent, comes out empty), so the tree is pruned instead:
    // each ancestor of the main content keeps only the child it leads through.
    if let Some(mut node) = main_content(&tree) {
        while let Some(parent) = parent_of(&node) {
            *parent.children.borrow_mut() = vec![node];
            node = parent;
        }
    }
    Ok(CONVERTER.tree_to_markdown(&tree).trim().to_string() + "\n")
}

/// The page's main content, when it marks it: its first `<main>` that is not `hidden`, else its
/// first element of `role="main"`.
fn main_content(root: &Rc<Node>) -> Option<Rc<Node>> {
    let shown = |node: &Node| attribute(node, "hidden").is_none();
    first_element(root, |node| {
        element_name(node) == Some("main") && shown(node)
    })
    .or_else(|| {
        first_element(root, |node| {
            shown(node)
                && attribute(node, "role")
                    .is_some_and(|role| role.trim().eq_ignore_ascii_case("main"))
        })
    })
}

/// The first element, in document order, that `wanted` says yes to; found without recursion.
fn first_element(root: &Rc<Node>, wanted: impl Fn(&Node) -> bool) -> Option<Rc<Node>> {
    let mut pending = vec![Rc::clone(root)];
    while let Some(node) = pending.pop() {
        if element_name(&node).is_some() && wanted(&node) {
            return Some(node);
        }
        pending.extend(node.children.borrow().iter().rev().map(Rc::clone));
    }
    None
}

fn parent_of(node: &Node) -> Option<Rc<Node>> {
    let weak = node.parent.take();
    let parent = weak.as_ref().and_then(std::rc::Weak::upgrade);
    node.parent.set(weak);
    parent
}

fn element_name(node: &Node) -> Option<&str> {
    match &node.data {
        NodeData::Element { name, .. } => Some(&name.local),
        _ => None,
    }
}

fn attribute(node: &Node, key: &str) -> Option<String> {
    match &node.data {
        NodeData::Element { attrs, .. } => attrs
            .borrow()
            .iter()
            .find(|a| &*a.name.local == key)
            .map(|a| a.value.to_string()),
        _ => None,
    }
}

/// How deep a tree's nodes nest, counted without recursion (the tree is what is being
/// bounded).
fn depth_of(root: &Rc<Node>) -> usize {
    let mut deepest = 0;
    let mut pending = vec![(Rc::clone(root), 0)];
    while let Some((node, depth)) = pending.pop() {
        deepest = deepest.max(depth);
        pending.extend(
            node.children
                .borrow()
                .iter()
                .map(|child| (Rc::clone(child), depth + 1)),
        );
    }
    deepest
}

/// A `<pre>` with no `<code>` inside, as a fenced block of its text. htmd fences only
/// `<pre><code>`; a bare `<pre>` (plain preformatted text, or Sphinx's highlighted code, a `<pre>`
/// of `<span>`s) would come out as prose, its lines open to reflowing by a Markdown reader.
fn preformatted(handlers: &dyn Handlers, element: Element) -> Option<HandlerResult> {
    let has_code = element.node.children.borrow().iter().any(
        |child| matches!(&child.data, NodeData::Element { name, .. } if &*name.local == "code"),
    );
    if has_code {
        return handlers.fallback(element);
    }
    let mut text = String::new();
    text_of(element.node, &mut text);
    let text = text.trim_matches('\n');
    if text.trim().is_empty() {
        return Some(HandlerResult::from(""));
    }
    let fence = if text.contains("```") { "~~~" } else { "```" };
    Some(format!("\n\n{fence}\n{text}\n{fence}\n\n").into())
}

/// The text of a node and everything under it, markup dropped (the parser decoded the entities).
fn text_of(node: &Node, out: &mut String) {
    match &node.data {
        NodeData::Text { contents } => out.push_str(&contents.borrow()),
        NodeData::Element { name, .. } if &*name.local == "br" => out.push('\n'),
        _ => {
            for child in node.children.borrow().iter() {
                text_of(child, out);
            }
        }
    }
}

/// The snapshot file name of a page: its path with `/` as `-`, `.html` dropped, `index` for `/`.
fn file_name(url: &Url, taken: &mut BTreeSet<String>) -> String {
    let path = url.path().trim_matches('/');
    let path = path
        .strip_suffix(".html")
        .or_else(|| path.strip_suffix(".htm"))
        .unwrap_or(path);
    let mut stem: String = path
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if let Some(query) = url.query() {
        stem.push('-');
        stem.push_str(&sha256_hex(query.as_bytes())[..8]);
    }
    if stem.is_empty() {
        stem = "index".into();
    }
    let mut name = format!("{stem}.md");
    let mut n = 2;
    while !taken.insert(name.clone()) {
        name = format!("{stem}-{n}.md");
        n += 1;
    }
    name
}

/// The wait between two fetches robots.txt's Crawl-delay asks for, at most 10 s; a longer one
/// is capped, and said.
fn crawl_delay(seconds: Option<f64>) -> (Duration, Option<String>) {
    let Some(seconds) = seconds else {
        return (Duration::ZERO, None);
    };
    let asked = Duration::from_secs_f64(seconds.min(86_400.0));
    if asked > MAX_CRAWL_DELAY {
        let warning = format!(
            "robots.txt asks for a Crawl-delay of {seconds} s; waited {} s between pages",
            MAX_CRAWL_DELAY.as_secs()
        );
        return (MAX_CRAWL_DELAY, Some(warning));
    }
    (asked, None)
}

/// The crawl id of a page set: the SHA-256 of the sorted urls, one a line, then their content
/// hashes in that order, one a line; the first 8 hex digits.
fn crawl_id<'p>(pages: impl Iterator<Item = (&'p str, &'p str)>) -> String {
    let mut sorted: Vec<(&str, &str)> = pages.collect();
    sorted.sort_unstable();
    let mut text = String::new();
    for (url, _) in &sorted {
        text.push_str(url);
        text.push('\n');
    }
    for (_, hash) in &sorted {
        text.push_str(hash);
        text.push('\n');
    }
    sha256_hex(text.as_bytes())[..8].to_string()
}

/// `crawl_date` of the snapshot's `_crawl-manifest.json` set to `date`, the rest kept; written
/// to a temporary file beside it and renamed over it, so a link in its place is replaced, not
/// followed. A manifest that is not a plain file, or not a JSON object, is left alone.
fn refresh_crawl_date(snapshot: &std::path::Path, date: &str) -> Result<(), BuiltinError> {
    let path = snapshot.join(MANIFEST);
    let plain = fs::symlink_metadata(&path).is_ok_and(|meta| meta.is_file());
    let Some(mut manifest) = plain
        .then(|| fs::read_to_string(&path).ok())
        .flatten()
        .and_then(|text| serde_json::from_str::<Value>(&text).ok())
        .filter(Value::is_object)
    else {
        return Ok(());
    };
    if manifest["crawl_date"] == json!(date) {
        return Ok(());
    }
    manifest["crawl_date"] = json!(date);
    let text = serde_json::to_string_pretty(&manifest).map_err(fail)? + "\n";
    let mut temp = tempfile::Builder::new()
        .prefix(".manifest-")
        .tempfile_in(snapshot)
        .map_err(|err| io_error("cannot create a file in", snapshot, &err))?;
    std::io::Write::write_all(&mut temp, text.as_bytes())
        .map_err(|err| io_error("cannot write", temp.path(), &err))?;
    temp.persist(&path)
        .map_err(|err| io_error("cannot replace", &path, &err.error))?;
    Ok(())
}

/// A YAML plain scalar when it reads back as the same string (a url with a query string
/// included: a quoted `source_url` is refused by the contextualizer's verify.sh), else a JSON
/// string, which YAML reads as a double-quoted one.
fn yaml_scalar(value: &Value) -> String {
    match value {
        Value::String(text)
            if !text.is_empty()
                && text
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.:/+?&=%~@;,!*'()#$".contains(c))
                && !text.starts_with(|c: char| "?:,#&*!%@'-".contains(c))
                && !text.ends_with(':') =>
        {
            text.clone()
        }
        Value::String(text) => serde_json::to_string(text).unwrap_or_default(),
        other => other.to_string(),
    }
}

fn crawl(with: &Value, ctx: &BuiltinCtx) -> BuiltinResult {
    let args: Args = parse("web.crawl", with)?;
    let timeout = parse_duration(&args.timeout).map_err(|why| fail(format!("timeout: {why}")))?;
    let site =
        Url::parse(&args.url).map_err(|err| fail(format!("`{}` is not a url: {err}", args.url)))?;
    if !matches!(site.scheme(), "http" | "https") {
        return Err(fail(format!("`{}` is not an http or https url", args.url)));
    }
    if !args.to.contains("{crawl_id}") {
        return Err(fail("`to` must hold `{crawl_id}`"));
    }
    let origin = site.origin();
    // A request waits no longer than what is left of the stage's own `timeout`.
    let timeout = match ctx.cancel.remaining() {
        Some(left) => timeout.min(left.max(Duration::from_millis(1))),
        None => timeout,
    };
    let client = Client::new(timeout, ctx.cancel);
    let include = glob_set(args.include.as_deref().unwrap_or(&["/**".to_string()]))?;
    let exclude = glob_set(args.exclude.as_deref().unwrap_or(&[]))?;

    let mut robots_url = site.clone();
    robots_url.set_path("/robots.txt");
    robots_url.set_query(None);
    let robots = match client.get(&robots_url, &origin) {
        Ok(answer) if answer.status == 200 => Robots::parse(&answer.body),
        _ => Robots::parse(""),
    };

    let stamp = crate::template::functions::now().map_or_else(
        |_| args.crawl_date.clone(),
        crate::template::functions::format_rfc3339,
    );
    let mut failures = Vec::new();
    let mut warnings = Vec::new();
    let mut candidates = Vec::new();
    let mut sitemap_source = Value::Null;
    if args.mode == Mode::List {
        sitemap_source = json!("page_list");
        for page in args.page_list.iter().flatten() {
            match site.join(page) {
                Ok(url) => candidates.push(url),
                Err(err) => {
                    failures.push(json!({ "url": page, "reason": format!("not a url: {err}") }));
                }
            }
        }
    } else {
        // The sitemap named, else the conventional places in order; the first that answers
        // with a sitemap is the one read.
        let tried: Vec<Url> = match args.sitemap_url.as_deref().filter(|s| !s.is_empty()) {
            Some(named) => vec![site
                .join(named)
                .map_err(|err| fail(format!("sitemap_url `{named}`: {err}")))?],
            None => {
                let mut places: Vec<Url> = [
                    under(&site, "sitemap.xml"),
                    under(&site, "sitemap_index.xml"),
                ]
                .into_iter()
                .flatten()
                .collect();
                places.extend(robots.sitemaps.iter().filter_map(|s| site.join(s).ok()));
                places.extend(site.join("/sitemap.xml").ok());
                let mut unique = Vec::new();
                for place in places {
                    if !unique.contains(&place) {
                        unique.push(place);
                    }
                }
                unique
            }
        };
        let mut missing = Vec::new();
        for place in &tried {
            match sitemap_pages(&client, &origin, place, false, &mut failures, &mut warnings) {
                Sitemap::Pages(pages) => {
                    sitemap_source = json!(place.as_str());
                    candidates = pages;
                    missing.clear();
                    break;
                }
                Sitemap::Missing(why) => missing.push((place, why)),
            }
        }
        for (place, why) in missing {
            failures.push(json!({ "url": place.as_str(), "reason": format!("sitemap: {why}") }));
        }
    }
    let (delay, warning) = crawl_delay(robots.delay);
    warnings.extend(warning);

    let mut seen = BTreeSet::new();
    let mut selected = Vec::new();
    let mut robots_skipped = Vec::new();
    for mut url in candidates {
        url.set_fragment(None);
        if url.origin() != origin {
            failures
                .push(json!({ "url": url.as_str(), "reason": "another origin than the site's" }));
            continue;
        }
        if !seen.insert(url.as_str().to_string()) {
            continue;
        }
        let path = url.path().to_string();
        if !include.is_match(&path) || exclude.is_match(&path) {
            continue;
        }
        let full = match url.query() {
            Some(query) => format!("{path}?{query}"),
            None => path,
        };
        if !robots.allowed(&full) {
            robots_skipped.push(json!(url.as_str()));
            continue;
        }
        selected.push(url);
    }
    let budget = args.budget.max(1) as usize;
    let truncated = selected.len().saturating_sub(budget);
    selected.truncate(budget);

    struct Page {
        url: String,
        file: String,
        body: String,
        hash: String,
    }
    let mut pages = Vec::new();
    let mut taken = BTreeSet::new();
    taken.insert(MANIFEST.to_string());
    for (n, url) in selected.iter().enumerate() {
        ctx.cancel.check()?;
        if n > 0 && !delay.is_zero() {
            // In slices, so an interrupt or the stage's deadline does not wait out the delay.
            let until = std::time::Instant::now() + delay;
            while let Some(left) = until.checked_duration_since(std::time::Instant::now()) {
                if left.is_zero() {
                    break;
                }
                std::thread::sleep(left.min(Duration::from_millis(50)));
                ctx.cancel.check()?;
            }
        }
        let failed =
            |reason: String| json!({ "url": url.as_str(), "reason": reason, "occurred_at": stamp });
        match client.get(url, &origin) {
            Ok(answer) if answer.status == 200 => {
                if answer.body.trim().is_empty() {
                    failures.push(failed("an empty page".to_string()));
                    continue;
                }
                let body = if answer.html {
                    match html_to_markdown(&answer.body) {
                        Ok(body) => body,
                        Err(why) => {
                            failures.push(failed(why));
                            continue;
                        }
                    }
                } else {
                    answer.body
                };
                if body.trim().is_empty() {
                    failures.push(failed(
                        "no text once its markup is removed (a page rendered by JavaScript?)"
                            .to_string(),
                    ));
                    continue;
                }
                let hash = sha256_hex(body.as_bytes());
                let file = file_name(url, &mut taken);
                pages.push(Page {
                    url: url.as_str().to_string(),
                    file,
                    body,
                    hash,
                });
            }
            Ok(answer) => failures.push(failed(format!("HTTP {}", answer.status))),
            Err(why) => failures.push(failed(why)),
        }
    }

    for failure in &mut failures {
        if let Some(failure) = failure.as_object_mut() {
            failure.entry("occurred_at").or_insert_with(|| json!(stamp));
        }
    }
    // A crawl that fetched nothing is a failed crawl, not an empty site: its snapshot would
    // replace the real one and report every page removed.
    if pages.is_empty() {
        let reasons: Vec<String> = failures
            .iter()
            .take(3)
            .map(|f| {
                format!(
                    "{}: {}",
                    f["url"].as_str().unwrap_or("?"),
                    f["reason"].as_str().unwrap_or("?")
                )
            })
            .collect();
        return Err(fail(format!(
            "no page of {} could be fetched ({} selected, {} failures{}{}), so no snapshot was made",
            args.url,
            selected.len(),
            failures.len(),
            if reasons.is_empty() { "" } else { ": " },
            reasons.join("; ")
        )));
    }
    let crawl_id = crawl_id(pages.iter().map(|p| (p.url.as_str(), p.hash.as_str())));
    let manifest = json!({
        "source_id": args.id,
        "crawl_id": crawl_id,
        "crawl_date": args.crawl_date,
        "fetcher": AGENT,
        "sitemap_source": sitemap_source,
        "pages": pages.iter().map(|p| json!({ "url": p.url, "file": p.file, "content_hash": p.hash, "bytes": p.body.len() })).collect::<Vec<_>>(),
        "failures": failures,
        "robots_disallows": robots.disallows(),
        "robots_skipped": robots_skipped,
        "budget_truncated": truncated,
        "warnings": warnings,
    });

    let target = ctx
        .writes
        .check(&ctx.resolve(&args.to.replace("{crawl_id}", &crawl_id)))?;
    if let Ok(found) = fs::symlink_metadata(&target) {
        // The same page set as a snapshot already there: that snapshot is current as of this
        // crawl, so its manifest takes this crawl's date (a decay budget counts from it) and
        // the new copy is not written. A link is left as it is and never written through.
        if found.is_dir() {
            refresh_crawl_date(&target, &args.crawl_date)?;
        }
        return Ok(
            json!({ "path": target.display().to_string(), "existing": true, "manifest": manifest }),
        );
    }
    let parent = target
        .parent()
        .ok_or_else(|| fail("`to` has no parent folder"))?;
    fs::create_dir_all(parent).map_err(|err| io_error("cannot create", parent, &err))?;
    let temp = tempfile::Builder::new()
        .prefix(".crawl-")
        .tempdir_in(parent)
        .map_err(|err| io_error("cannot create a folder in", parent, &err))?;
    let write = |path: PathBuf, text: &str| {
        fs::write(&path, text).map_err(|err| io_error("cannot write", &path, &err))
    };
    for page in &pages {
        let mut front = format!(
            "---\nsource_url: {}\ncrawl_date: {}\n",
            yaml_scalar(&json!(page.url)),
            yaml_scalar(&json!(args.crawl_date))
        );
        for (key, value) in &args.frontmatter {
            front.push_str(&format!("{key}: {}\n", yaml_scalar(value)));
        }
        front.push_str("---\n\n");
        write(temp.path().join(&page.file), &(front + &page.body))?;
    }
    let text = serde_json::to_string_pretty(&manifest).map_err(fail)? + "\n";
    write(temp.path().join(MANIFEST), &text)?;
    let kept = temp.keep();
    fs::rename(&kept, &target).map_err(|err| {
        let _ = fs::remove_dir_all(&kept);
        io_error("cannot move the snapshot to", &target, &err)
    })?;
    Ok(json!({ "path": target.display().to_string(), "existing": false, "manifest": manifest }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_with_a_query_string_is_a_plain_scalar() {
        let plain = |text: &str| yaml_scalar(&json!(text));
        assert_eq!(
            plain("https://site.test/page?id=7&lang=en#top"),
            "https://site.test/page?id=7&lang=en#top"
        );
        assert_eq!(plain("30d"), "30d");
        for quoted in [
            "two words",
            "key: value",
            "ends:",
            "-lead",
            "#x",
            "",
            "a\nb",
            "?q",
        ] {
            assert_eq!(
                plain(quoted),
                serde_json::to_string(quoted).expect("a string")
            );
        }
    }

    #[test]
    fn robots_longest_match_wins() {
        let robots = Robots::parse("User-agent: *\nDisallow: /private/\nAllow: /private/ok\nDisallow: /*.pdf$\nSitemap: /s.xml\n");
        assert!(!robots.allowed("/private/x"));
        assert!(robots.allowed("/private/ok/page"));
        assert!(!robots.allowed("/a/b.pdf"));
        assert!(robots.allowed("/a/b.pdf?x"));
        assert!(robots.allowed("/docs"));
        assert_eq!(robots.sitemaps, ["/s.xml"]);
    }

    #[test]
    fn sitemap_locs_decode_entities_character_references_and_cdata() {
        let body = concat!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n",
            "<!-- generated -->\n",
            "<sm:urlset xmlns:sm=\"http://www.sitemaps.org/schemas/sitemap/0.9\">\n",
            "  <sm:url><sm:loc>\n    https://x.test/a?b=1&amp;c=2\n  </sm:loc></sm:url>\n",
            "  <url><loc>https://x.test/&#x63;af&#233;</loc></url>\n",
            "  <url><loc><![CDATA[https://x.test/raw?a=1&b=2]]></loc></url>\n",
            "  <url><loc>https://x.test/bare?a=1&b=2</loc></url>\n",
            "</sm:urlset>\n",
        );
        let (index, locs) = sitemap_locs(body).expect("a sitemap");
        assert!(!index);
        assert_eq!(
            locs,
            [
                "https://x.test/a?b=1&c=2",
                "https://x.test/café",
                "https://x.test/raw?a=1&b=2",
                "https://x.test/bare?a=1&b=2",
            ]
        );
        let (index, locs) =
            sitemap_locs("<sitemapindex><sitemap><loc>/s1.xml</loc></sitemap></sitemapindex>")
                .expect("an index");
        assert!(index);
        assert_eq!(locs, ["/s1.xml"]);
        assert_eq!(sitemap_locs("<urlset/>"), Ok((false, Vec::new())));
        let html = "<!DOCTYPE html><html><body>no &lt;urlset&gt; here</body></html>";
        assert!(sitemap_locs(html).unwrap_err().contains("not a sitemap"));
    }

    #[test]
    fn robots_wildcards_match_within_a_group_of_several_agents() {
        let robots = Robots::parse(concat!(
            "User-agent: other\nUser-agent: *\n",
            "Disallow: /*/private/*\nAllow: /*/private/*.css$\nDisallow: /search*q=\n",
        ));
        assert!(!robots.allowed("/a/private/x"));
        assert!(robots.allowed("/a/private/x.css"), "the longer allow wins");
        assert!(
            !robots.allowed("/a/private/x.css?v=1"),
            "`$` anchors the end"
        );
        assert!(!robots.allowed("/search?lang=en&q=1"));
        assert!(robots.allowed("/searchable"));
        assert!(robots.allowed("/private/x"), "`/*/` needs a folder before");
    }

    #[test]
    fn the_crawl_id_is_the_page_sets() {
        // The example snapshot the skill-engine documents: four pages, crawl id 8f3025fb.
        let pages = [
            (
                "https://mock-site.test/index.html",
                "c5b3c5e4708da7010861920d8e8ee35973abf77dc3334454c750a9b290508a3d",
            ),
            (
                "https://mock-site.test/docs/intro.html",
                "dd66631296ec0bbfba34db428a4493f8dc86256d374183ffac86156a9a9150ab",
            ),
            (
                "https://mock-site.test/docs/guide.html",
                "b40574d68082e6e8d7e9b72a8c9388b31eac93c9a452cb21b31ab46566439a0b",
            ),
            (
                "https://mock-site.test/blog/post.html",
                "dc67fa9d745bdd462b5a2ee52b0fc1532607ae724d0536786086acf45fc8ae57",
            ),
        ];
        assert_eq!(crawl_id(pages.into_iter()), "8f3025fb");
        assert_eq!(crawl_id(pages.into_iter().rev()), "8f3025fb");
    }

    #[test]
    fn robots_crawl_delay_is_the_groups() {
        let robots = Robots::parse(
            "User-agent: other\nCrawl-delay: 1\n\nUser-agent: *\nCrawl-delay: 2.5\nDisallow: /x\n",
        );
        assert_eq!(robots.delay, Some(2.5));
        assert_eq!(Robots::parse("User-agent: *\nDisallow: /x\n").delay, None);
        assert_eq!(crawl_delay(None), (Duration::ZERO, None));
        assert_eq!(crawl_delay(Some(2.5)), (Duration::from_millis(2500), None));
        assert_eq!(
            crawl_delay(Some(30.0)),
            (
                Duration::from_secs(10),
                Some(
                    "robots.txt asks for a Crawl-delay of 30 s; waited 10 s between pages"
                        .to_string()
                )
            )
        );
    }

    #[test]
    fn the_conventional_sitemaps_are_under_the_source_url() {
        let url = |s: &str| Url::parse(s).expect("url");
        assert_eq!(
            under(&url("http://x/docs"), "sitemap.xml").map(String::from),
            Some("http://x/docs/sitemap.xml".into())
        );
        assert_eq!(
            under(&url("http://x/docs/?q=1"), "sitemap_index.xml").map(String::from),
            Some("http://x/docs/sitemap_index.xml".into())
        );
        assert_eq!(
            under(&url("http://x"), "sitemap.xml").map(String::from),
            Some("http://x/sitemap.xml".into())
        );
    }

    #[test]
    fn html_becomes_markdown() {
        let text = html_to_markdown("<html><head><title>t</title></head><body><h1>Guide</h1><p>One\n two</p><ul><li>a</li></ul><script>x()</script></body></html>").unwrap();
        assert_eq!(text, "# Guide\n\nOne two\n\n- a\n");
        // A page whose text is all script is empty once converted, which the crawl reports.
        let text = html_to_markdown("<html><head><title>App</title></head><body><div id=\"app\"></div><script>render()</script><noscript>Turn on JavaScript.</noscript></body></html>").unwrap();
        assert_eq!(text, "\n");
    }

    #[test]
    fn a_page_that_marks_its_main_content_gives_that_alone() {
        // The chrome of a documentation page (a help popup, a theme list, a title bar) sits
        // outside its `<main>`.
        let page =
            "<body><div id=\"help\"><h2>Keyboard shortcuts</h2><p>Press S to search</p></div>\
            <ul id=\"themes\"><li>Light</li><li>Coal</li></ul>\
            <main hidden><p>a template</p></main>\
            <div class=\"page\"><main><h1>Guide</h1><p>Text.</p></main></div>\
            <footer>Built with a generator</footer></body>";
        assert_eq!(html_to_markdown(page).unwrap(), "# Guide\n\nText.\n");
        // Sphinx and Read the Docs themes mark it by role.
        let page = "<body><div class=\"sidebar\">Contents</div>\
            <div role=\"Main\" class=\"document\"><h1>API</h1></div></body>";
        assert_eq!(html_to_markdown(page).unwrap(), "# API\n");
        // Unmarked, the whole body is the page.
        let page = "<body><div>Menu</div><h1>Guide</h1></body>";
        assert_eq!(html_to_markdown(page).unwrap(), "Menu\n\n# Guide\n");
    }

    #[test]
    fn a_page_nested_past_the_limit_is_refused_not_walked() {
        // Nested as deep as a browser builds: converted, on a test thread's stack.
        let page = |depth: usize| "<div>".repeat(depth) + "deep" + &"</div>".repeat(depth);
        let text = html_to_markdown(&page(MAX_DEPTH - 8)).unwrap();
        assert_eq!(text, "deep\n");
        // Deep enough to overflow a test thread's stack in the converter's walk: refused, with
        // the depth (the document, `<html>` and `<body>` above the divs).
        let why = html_to_markdown(&page(5_000)).unwrap_err();
        assert!(why.contains("nest 5003 deep"), "{why}");
        assert!(why.contains("at most 512"), "{why}");
    }

    #[test]
    fn markup_is_parsed_not_matched() {
        // A `>` inside a quoted attribute ends no tag, and a list inside a list stays nested.
        let text = html_to_markdown(
            r#"<p>See <a title="a>b" href="x.html">X</a>.</p><ul><li>one<ul><li>inner</li></ul></li><li>two</li></ul>"#,
        )
        .unwrap();
        assert_eq!(
            text,
            "See [X](x.html \"a>b\").\n\n- one\n  - inner\n- two\n"
        );
    }

    #[test]
    fn lists_keep_their_items_and_code_keeps_its_lines() {
        let text = html_to_markdown(
            "<p>Steps:</p><ul><li>install</li><li>run <code>x</code></li></ul><pre><code>fn main() {\n    let a = 1 &lt; 2;\n}</code></pre><p>Done.</p>",
        )
        .unwrap();
        assert_eq!(
            text,
            "Steps:\n\n- install\n- run `x`\n\n```\nfn main() {\n    let a = 1 < 2;\n}\n```\n\nDone.\n"
        );
        // A `<pre>` of highlighted spans, with no `<code>`, is a code block too.
        let text = html_to_markdown(
            "<div class=\"highlight\"><pre><span class=\"k\">def</span> f():\n    <span class=\"k\">return</span> 1 &lt; 2</pre></div>",
        )
        .unwrap();
        assert_eq!(text, "```\ndef f():\n    return 1 < 2\n```\n");
    }

    #[test]
    fn file_names_are_unique() {
        let mut taken = BTreeSet::new();
        let url = |s: &str| Url::parse(s).expect("url");
        assert_eq!(
            file_name(&url("http://x/docs/intro.html"), &mut taken),
            "docs-intro.md"
        );
        assert_eq!(file_name(&url("http://x/"), &mut taken), "index.md");
        assert_eq!(
            file_name(&url("http://x/docs/intro"), &mut taken),
            "docs-intro-2.md"
        );
    }
}
