//! What a template reads and loads, from its syntax tree: every path into the scope it reads
//! (`stages.scan.output.sources[0].meta`, `a['b']`), each occurrence with where it is written,
//! and every template it includes, imports or extends by a literal name.
//!
//! minijinja's own `undeclared_variables` stops a path at its first index and gives no
//! location; `check` needs both, so it walks the tree itself. Names the template binds (`set`,
//! `for` targets, macro arguments, imports, `loop`) are not reads.

use std::ops::Range;

use minijinja::machinery::{ast, parse, parse_expr, WhitespaceConfig};
use minijinja::syntax::SyntaxConfig;

/// One read of a path: its segments (an index as its digits), the bytes of the template
/// source from the root's first character to the last segment's last, and each segment's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Read {
    pub(crate) path: Vec<String>,
    pub(crate) span: Range<usize>,
    pub(crate) segments: Vec<Range<usize>>,
}

impl Read {
    /// The bytes of segment `i`, or of the whole path when there is no such segment.
    pub(crate) fn segment(&self, i: usize) -> Range<usize> {
        self.segments
            .get(i)
            .cloned()
            .unwrap_or_else(|| self.span.clone())
    }
}

/// A template loaded by name: `include`, `import`, `from ... import` or `extends`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Load {
    pub(crate) name: String,
    pub(crate) span: Range<usize>,
    pub(crate) ignore_missing: bool,
}

/// What a template reads and loads, in the order they are written.
#[derive(Debug, Default)]
pub(crate) struct Reads {
    pub(crate) reads: Vec<Read>,
    pub(crate) loads: Vec<Load>,
    /// What flows through its bindings, when it may have any ([`super::flow::wanted`]).
    pub(crate) flow: Option<Box<super::flow::Flow>>,
}

/// The reads of a template's source, or why it does not parse.
pub(crate) fn of_template(source: &str) -> Result<Reads, minijinja::Error> {
    if let Some(reads) = of_lookups(source) {
        return Ok(reads);
    }
    // A unit struct unless minijinja's `custom_syntax` is on; `default` is right either way.
    #[allow(clippy::default_constructed_unit_structs)]
    let tree = super::guarded(|| {
        parse(
            source,
            "<template>",
            SyntaxConfig::default(),
            WhitespaceConfig::default(),
        )
    })?;
    let mut walker = Walker::default();
    walker.stmt(&tree);
    let mut reads = walker.finish();
    if super::flow::wanted(source) {
        reads.flow = Some(Box::new(super::flow::of_tree(&tree)));
    }
    Ok(reads)
}

/// The reads of a bare expression.
pub(crate) fn of_expression(source: &str) -> Option<Reads> {
    let trimmed = source.trim_start();
    if let Some(read) = dotted(trimmed.trim_end(), source.len() - trimmed.len()) {
        return Some(Reads {
            reads: vec![read],
            ..Reads::default()
        });
    }
    let expr = super::guarded(|| parse_expr(source)).ok()?;
    let mut walker = Walker::default();
    walker.expr(&expr);
    let mut reads = walker.finish();
    if super::flow::wanted(source) {
        reads.flow = Some(Box::new(super::flow::of_expr(&expr)));
    }
    Some(reads)
}

/// The reads of a template that is only text and `{{ a.b.c }}` lookups (most are), found
/// without building its tree: a workflow of thousands of stages is checked as fast as before.
fn of_lookups(source: &str) -> Option<Reads> {
    let mut reads = Vec::new();
    let mut at = 0;
    while let Some(found) = source[at..].find('{') {
        let start = at + found;
        let rest = &source[start..];
        if rest.starts_with("{%") || rest.starts_with("{#") {
            return None;
        }
        if !rest.starts_with("{{") {
            at = start + 1;
            continue;
        }
        let inner_start = start + 2;
        let end = inner_start + source[inner_start..].find("}}")?;
        let inner = &source[inner_start..end];
        let trimmed = inner.trim_start();
        let offset = inner_start + inner.len() - trimmed.len();
        reads.push(dotted(trimmed.trim_end(), offset)?);
        at = end + 2;
    }
    Some(Reads {
        reads,
        ..Reads::default()
    })
}

/// `a.b.c` written at `offset`, when that is all the text is.
fn dotted(text: &str, offset: usize) -> Option<Read> {
    let is_ident = |s: &str| {
        let mut chars = s.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !super::compiled::KEYWORDS.contains(&s)
    };
    let mut path = Vec::new();
    let mut segments = Vec::new();
    let mut start = offset;
    for segment in text.split('.') {
        if !is_ident(segment) {
            return None;
        }
        path.push(segment.to_string());
        segments.push(start..start + segment.len());
        start += segment.len() + 1;
    }
    Some(Read {
        path,
        span: offset..offset + text.len(),
        segments,
    })
}

#[derive(Default)]
struct Walker<'a> {
    /// Names bound by the template, innermost scope last.
    bound: Vec<Vec<&'a str>>,
    out: Reads,
    /// Every `a ~ b`: the bytes of the whole, where `a` ends and where `b` starts.
    concats: Vec<(Range<usize>, usize, usize)>,
}

/// The name [`bounded_concat`] calls `~` by; registered with the engine's functions.
pub(crate) const CONCAT: &str = "__concat";

/// `source` (a template, or a bare expression when `expression`) with each `a ~ b` written
/// `__concat(a , b)`: minijinja joins the two strings of a `~` with no bound and no hook, so a
/// `~` in a loop could double a string until memory ran out; the engine's function refuses a
/// string past the bound first ([`super::functions`]). The rewrite keeps every line where it
/// was. `None` when there is no `~` to rewrite, or the source does not parse (its errors are
/// then the original's).
#[allow(clippy::default_constructed_unit_structs)]
pub(crate) fn bounded_concat(source: &str, expression: bool) -> Option<String> {
    use minijinja::machinery::{tokenize, Token};
    if !source.contains('~') {
        return None;
    }
    let mut walker = Walker::default();
    if expression {
        let expr = super::guarded(|| parse_expr(source)).ok()?;
        walker.expr(&expr);
    } else {
        let tree = super::guarded(|| {
            parse(
                source,
                "<template>",
                SyntaxConfig::default(),
                WhitespaceConfig::default(),
            )
        })
        .ok()?;
        walker.stmt(&tree);
    }
    if walker.concats.is_empty() {
        return None;
    }
    let tildes: Vec<usize> = super::guarded(|| {
        tokenize(
            source,
            expression,
            SyntaxConfig::default(),
            WhitespaceConfig::default(),
        )
        .filter_map(|token| match token {
            Ok((Token::Tilde, span)) => Some(Ok(span.start_offset as usize)),
            Ok(_) => None,
            Err(error) => Some(Err(error)),
        })
        .collect::<Result<Vec<_>, _>>()
    })
    .ok()?;
    // Edits by offset: (offset, order among edits at that offset, bytes replaced, text).
    let mut edits: Vec<(usize, usize, usize, String)> = Vec::new();
    for (whole, left_end, right_start) in &walker.concats {
        let tilde = tildes
            .iter()
            .copied()
            .find(|&t| t >= *left_end && t < *right_start)?;
        let len = whole.end - whole.start;
        // Opened outermost first, closed innermost first.
        edits.push((whole.start, usize::MAX - len, 0, format!("{CONCAT}(")));
        edits.push((tilde, 0, 1, ",".to_string()));
        edits.push((whole.end, len, 0, ")".to_string()));
    }
    edits.sort_by_key(|e| (e.0, e.1));
    let mut out = String::with_capacity(source.len() + edits.len() * 8);
    let mut at = 0;
    for (offset, _, replaced, text) in edits {
        if offset < at || !source.is_char_boundary(offset) {
            return None;
        }
        out.push_str(&source[at..offset]);
        out.push_str(&text);
        at = offset + replaced;
    }
    out.push_str(source.get(at..)?);
    Some(out)
}

fn range(span: minijinja::machinery::Span) -> Range<usize> {
    span.start_offset as usize..span.end_offset as usize
}

impl<'a> Walker<'a> {
    fn finish(self) -> Reads {
        self.out
    }

    fn is_bound(&self, name: &str) -> bool {
        matches!(name, "loop" | "self" | "caller" | "super")
            || self.bound.iter().any(|scope| scope.contains(&name))
    }

    fn bind(&mut self, target: &ast::Expr<'a>) {
        match target {
            ast::Expr::Var(var) => {
                if self.bound.is_empty() {
                    self.bound.push(Vec::new());
                }
                if let Some(scope) = self.bound.last_mut() {
                    scope.push(var.id);
                }
            }
            ast::Expr::List(list) => list.items.iter().for_each(|item| self.bind(item)),
            _ => {}
        }
    }

    fn scoped(&mut self, f: impl FnOnce(&mut Self)) {
        self.bound.push(Vec::new());
        f(self);
        self.bound.pop();
    }

    fn body(&mut self, body: &[ast::Stmt<'a>]) {
        for stmt in body {
            self.stmt(stmt);
        }
    }

    fn load(&mut self, name: &ast::Expr<'a>, ignore_missing: bool) {
        let names: Vec<(&ast::Expr<'a>, Range<usize>)> = match name {
            ast::Expr::Const(c) => vec![(name, range(c.span()))],
            ast::Expr::List(list) => list
                .items
                .iter()
                .filter_map(|item| match item {
                    ast::Expr::Const(c) => Some((item, range(c.span()))),
                    _ => None,
                })
                .collect(),
            other => {
                // A name computed at run time: what it reads is still read.
                self.expr(other);
                return;
            }
        };
        for (expr, span) in names {
            if let ast::Expr::Const(c) = expr {
                if let Some(text) = c.value.as_str() {
                    self.out.loads.push(Load {
                        name: text.to_string(),
                        span,
                        ignore_missing,
                    });
                }
            }
        }
    }

    fn stmt(&mut self, stmt: &ast::Stmt<'a>) {
        match stmt {
            ast::Stmt::Template(t) => self.body(&t.children),
            ast::Stmt::EmitExpr(e) => self.expr(&e.expr),
            ast::Stmt::EmitRaw(_) => {}
            ast::Stmt::ForLoop(f) => {
                self.expr(&f.iter);
                self.scoped(|w| {
                    w.bind(&f.target);
                    if let Some(filter) = &f.filter_expr {
                        w.expr(filter);
                    }
                    w.body(&f.body);
                });
                self.scoped(|w| w.body(&f.else_body));
            }
            ast::Stmt::IfCond(i) => {
                self.expr(&i.expr);
                self.scoped(|w| w.body(&i.true_body));
                self.scoped(|w| w.body(&i.false_body));
            }
            ast::Stmt::WithBlock(w) => self.scoped(|inner| {
                for (target, value) in &w.assignments {
                    inner.expr(value);
                    inner.bind(target);
                }
                inner.body(&w.body);
            }),
            ast::Stmt::Set(s) => {
                self.expr(&s.expr);
                self.bind(&s.target);
            }
            ast::Stmt::SetBlock(s) => {
                if let Some(filter) = &s.filter {
                    self.expr(filter);
                }
                self.scoped(|w| w.body(&s.body));
                self.bind(&s.target);
            }
            ast::Stmt::AutoEscape(a) => {
                self.expr(&a.enabled);
                self.scoped(|w| w.body(&a.body));
            }
            ast::Stmt::FilterBlock(f) => {
                self.expr(&f.filter);
                self.scoped(|w| w.body(&f.body));
            }
            ast::Stmt::Block(b) => self.scoped(|w| w.body(&b.body)),
            ast::Stmt::Extends(e) => self.load(&e.name, false),
            ast::Stmt::Include(i) => self.load(&i.name, i.ignore_missing),
            ast::Stmt::Import(i) => {
                self.load(&i.expr, false);
                self.bind(&i.name);
            }
            ast::Stmt::FromImport(f) => {
                self.load(&f.expr, false);
                for (name, alias) in &f.names {
                    self.bind(alias.as_ref().unwrap_or(name));
                }
            }
            ast::Stmt::Macro(m) => {
                self.bound_name(m.name);
                self.scoped(|w| w.macro_body(m));
            }
            ast::Stmt::CallBlock(c) => {
                self.call(&c.call);
                self.scoped(|w| w.macro_body(&c.macro_decl));
            }
            ast::Stmt::Do(d) => self.call(&d.call),
        }
    }

    fn bound_name(&mut self, name: &'a str) {
        if self.bound.is_empty() {
            self.bound.push(Vec::new());
        }
        if let Some(scope) = self.bound.last_mut() {
            scope.push(name);
        }
    }

    fn macro_body(&mut self, m: &ast::Macro<'a>) {
        m.defaults.iter().for_each(|d| self.expr(d));
        m.args.iter().for_each(|arg| self.bind(arg));
        self.body(&m.body);
    }

    fn call(&mut self, call: &ast::Call<'a>) {
        match &call.expr {
            // `x.items()`: a method of what `x` is, not a field of it.
            ast::Expr::GetAttr(attr) => self.expr(&attr.expr),
            other => self.expr(other),
        }
        call.args.iter().for_each(|arg| self.arg(arg));
    }

    fn arg(&mut self, arg: &ast::CallArg<'a>) {
        match arg {
            ast::CallArg::Pos(e)
            | ast::CallArg::Kwarg(_, e)
            | ast::CallArg::PosSplat(e)
            | ast::CallArg::KwargSplat(e) => self.expr(e),
        }
    }

    /// A read of the chain `expr` heads, when it ends at a free variable.
    fn read(&mut self, expr: &ast::Expr<'a>, end: usize) -> bool {
        let Some((path, segments)) = chain(expr) else {
            return false;
        };
        if self.is_bound(&path[0]) {
            return true;
        }
        self.out.reads.push(Read {
            path,
            span: segments[0].start..end,
            segments,
        });
        true
    }

    fn expr(&mut self, expr: &ast::Expr<'a>) {
        match expr {
            ast::Expr::Var(var) => {
                self.read(expr, var.span().end_offset as usize);
            }
            ast::Expr::GetAttr(attr) => {
                if !self.read(expr, attr.span().end_offset as usize) {
                    self.expr(&attr.expr);
                }
            }
            ast::Expr::GetItem(item) => {
                if !self.read(expr, item.span().end_offset as usize) {
                    // A computed index: the path up to it is read, and so is the index.
                    self.expr(&item.expr);
                    self.expr(&item.subscript_expr);
                }
            }
            ast::Expr::Const(_) => {}
            ast::Expr::Slice(s) => {
                self.expr(&s.expr);
                for part in [&s.start, &s.stop, &s.step].into_iter().flatten() {
                    self.expr(part);
                }
            }
            ast::Expr::UnaryOp(u) => self.expr(&u.expr),
            ast::Expr::BinOp(b) => {
                if matches!(b.op, ast::BinOpKind::Concat) {
                    self.concats.push((
                        range(b.span()),
                        b.left.span().end_offset as usize,
                        b.right.span().start_offset as usize,
                    ));
                }
                self.expr(&b.left);
                self.expr(&b.right);
            }
            ast::Expr::Compare(c) => {
                self.expr(&c.expr);
                c.ops.iter().for_each(|op| self.expr(&op.expr));
            }
            ast::Expr::IfExpr(i) => {
                self.expr(&i.test_expr);
                self.expr(&i.true_expr);
                if let Some(other) = &i.false_expr {
                    self.expr(other);
                }
            }
            ast::Expr::Filter(f) => {
                if let Some(inner) = &f.expr {
                    self.expr(inner);
                }
                f.args.iter().for_each(|arg| self.arg(arg));
            }
            ast::Expr::Test(t) => {
                self.expr(&t.expr);
                t.args.iter().for_each(|arg| self.arg(arg));
            }
            ast::Expr::Call(c) => self.call(c),
            ast::Expr::List(l) => l.items.iter().for_each(|item| self.expr(item)),
            ast::Expr::Map(m) => {
                m.keys.iter().for_each(|k| self.expr(k));
                m.values.iter().for_each(|v| self.expr(v));
            }
        }
    }
}

/// A chain of attribute and constant index lookups ending at a variable: the variable and
/// the segments, outermost last. `None` when the chain ends elsewhere.
pub(crate) fn chain(expr: &ast::Expr<'_>) -> Option<(Vec<String>, Vec<Range<usize>>)> {
    match expr {
        ast::Expr::Var(var) => Some((vec![var.id.to_string()], vec![range(var.span())])),
        ast::Expr::GetAttr(attr) => {
            let (mut path, mut segments) = chain(&attr.expr)?;
            let end = attr.span().end_offset as usize;
            path.push(attr.name.to_string());
            segments.push(end.saturating_sub(attr.name.len())..end);
            Some((path, segments))
        }
        ast::Expr::GetItem(item) => {
            let (key, at) = match &item.subscript_expr {
                ast::Expr::Const(c) => (
                    c.value
                        .as_str()
                        .map(str::to_string)
                        .or_else(|| c.value.as_usize().map(|n| n.to_string())),
                    range(c.span()),
                ),
                _ => (None, 0..0),
            };
            let key = key?;
            let (mut path, mut segments) = chain(&item.expr)?;
            path.push(key);
            segments.push(at);
            Some((path, segments))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(reads: &Reads) -> Vec<String> {
        reads.reads.iter().map(|r| r.path.join(".")).collect()
    }

    #[test]
    fn indexes_and_quoted_keys_continue_the_path() {
        let source = "{{ stages.scan.output.sources[0].meta.sise }} {{ a['b'].c }}";
        let reads = of_template(source).expect("parses");
        assert_eq!(
            paths(&reads),
            ["stages.scan.output.sources.0.meta.sise", "a.b.c"]
        );
        let first = &reads.reads[0];
        assert_eq!(
            &source[first.span.clone()],
            "stages.scan.output.sources[0].meta.sise"
        );
        let segments: Vec<&str> = first.segments.iter().map(|s| &source[s.clone()]).collect();
        assert_eq!(
            segments,
            ["stages", "scan", "output", "sources", "0", "meta", "sise"]
        );
        assert_eq!(&source[reads.reads[1].segment(1)], "'b'");
    }

    #[test]
    fn a_computed_index_ends_the_path_and_is_read_itself() {
        let reads = of_expression("stages.a.output[inputs.key].x").expect("parses");
        assert_eq!(paths(&reads), ["stages.a.output", "inputs.key"]);
    }

    #[test]
    fn bound_names_are_not_reads_and_each_occurrence_is() {
        let source = "{% set s = stages.a.output %}{{ s.x }}{% for i in inputs.list %}{{ i.y }}{{ loop.index }}{% endfor %}{{ inputs.n }}{{ inputs.n }}";
        let reads = of_template(source).expect("parses");
        assert_eq!(
            paths(&reads),
            ["stages.a.output", "inputs.list", "inputs.n", "inputs.n"]
        );
        assert_ne!(reads.reads[2].span, reads.reads[3].span);
    }

    #[test]
    fn plain_lookups_read_as_the_tree_does() {
        for source in [
            "a {{ inputs.word }} b {{stages.x.output.y}} {",
            "{{ inputs.n }}",
            "plain",
        ] {
            let fast = of_lookups(source).expect("only lookups");
            let mut walker = Walker::default();
            let tree =
                parse(source, "t", SyntaxConfig, WhitespaceConfig::default()).expect("parses");
            walker.stmt(&tree);
            assert_eq!(fast.reads, walker.finish().reads, "{source}");
        }
        assert!(of_lookups("{{ a[0] }}").is_none());
        assert!(of_lookups("{{ true }}").is_none());
        assert!(of_lookups("{% if a %}{% endif %}").is_none());
    }

    #[test]
    fn a_method_call_is_not_a_field() {
        let reads =
            of_template("{% for k, v in stages.a.output.items() %}{% endfor %}").expect("parses");
        assert_eq!(paths(&reads), ["stages.a.output"]);
    }

    #[test]
    fn literal_loads_are_listed_with_their_names() {
        let source = "{% extends \"base.j2\" %}{% import 'm.j2' as m %}{% from \"f.j2\" import g %}{% include ['x.j2', 'y.j2'] ignore missing %}{% include name %}{{ m.f(g) }}";
        let reads = of_template(source).expect("parses");
        let names: Vec<&str> = reads.loads.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["base.j2", "m.j2", "f.j2", "x.j2", "y.j2"]);
        assert!(reads.loads[3].ignore_missing && !reads.loads[0].ignore_missing);
        assert_eq!(&source[reads.loads[1].span.clone()], "'m.j2'");
        assert_eq!(paths(&reads), ["name"]);
    }

    #[test]
    fn a_concatenation_is_rewritten_to_the_bounded_function_and_renders_the_same() {
        let rewritten = |source: &str| bounded_concat(source, false);
        assert_eq!(
            rewritten("{{ a ~ b ~ (c ~ 'd') }}").as_deref(),
            Some("{{ __concat(__concat(a , b) , (__concat(c , 'd'))) }}")
        );
        assert_eq!(rewritten("no tilde {{ a }}"), None);
        assert_eq!(rewritten("a ~ b outside blocks"), None);
        assert_eq!(rewritten("{{ a ~ }}"), None, "a syntax error is left alone");
        assert_eq!(
            bounded_concat("x ~ y|upper", true).as_deref(),
            Some("__concat(x , y|upper)")
        );
        let scope = minijinja::context! { a => "A", b => 2, c => "C", n => (), xs => ["p", "q"] };
        for source in [
            "{{ a ~ b ~ (c ~ 'd') }}",
            "{% set s = a %}{% for x in xs %}{% set s = s ~ x ~ loop.index %}{% endfor %}{{ s }}",
            "{{ (a ~ b) | lower }} {{ a ~ b | string | upper }} {{ n ~ 'x' }}",
            "{% macro m(v=a ~ 'z') %}{{ v ~ caller() }}{% endmacro %}{% call m() %}{{ c ~ '~' }}{% endcall %}",
            "{{ xs | map('upper') | join('~') ~ [a ~ 1, {'k': c ~ 2}] | tojson }}",
            "{{ 'é' ~ a ~ 'ü' }} {% if a ~ b == 'A2' %}yes{% endif %}",
            // An `if` with no `else` is the silent undefined: it joins as nothing, strict or not.
            "{{ a ~ ('s' if b != 2) ~ ('t' if b == 2) }}",
        ] {
            let plain = minijinja::Environment::new()
                .render_str(source, &scope)
                .unwrap();
            let env = crate::template::environment();
            let bounded = env
                .render_str(&crate::template::bounded_source(source), &scope)
                .unwrap();
            assert_eq!(plain, bounded, "{source}");
            assert_ne!(crate::template::bounded_source(source), source);
        }
        let env = crate::template::environment();
        let error = env
            .render_str(&crate::template::bounded_source("{{ x ~ 'y' }}"), &scope)
            .unwrap_err();
        assert_eq!(error.kind(), minijinja::ErrorKind::UndefinedError);
    }
}
