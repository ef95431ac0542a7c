//! The template engine: quick-xml events in, quick-xml events out.
//!
//! A template is an ordinary XML document. The engine reads it with [`quick_xml::Reader`]
//! and writes it again with [`quick_xml::Writer`], applying these rules:
//!
//! - `{name}` in an attribute value or in text is replaced by the variable `name`. The
//!   value is escaped by quick-xml when written. An unset variable is an error
//!   ([`XmlError::UnknownVariable`]). `{{` and `}}` stand for literal braces.
//! - An attribute whose whole value is `{name?}` is dropped when `name` is unset.
//! - An element with `vgpud:if="name"` is kept, without that attribute, only when `name`
//!   is set; otherwise the element and everything in it is skipped.
//! - The empty element `<vgpud:insert name="list"/>` is replaced by the fragments of the
//!   list `list`, each parsed and written again as events (no placeholders in them).
//! - Comments, processing instructions and the XML declaration are not copied. Any other
//!   `vgpud:` element or attribute is an error.
//! - Text is trimmed; whitespace-only text is dropped.
//!
//! Namespaces: the template markup is the prefix `vgpud` where it is undeclared or declared
//! as [`TEMPLATE_NS`] (`xmlns:vgpud="urn:vgpud:template:1"`, a declaration that is not
//! copied). Where `xmlns:vgpud` declares any other namespace, such as vgpud's domain
//! metadata namespace ([`super::METADATA_NS`]), `vgpud:` names in that element and below
//! are ordinary XML: they are copied with their declaration, and the template markup is
//! unavailable there. The same holds in fragments, which may carry such elements but no
//! template markup.
//!
//! The output is indented with 2 spaces, has no XML declaration and ends with a newline.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

use quick_xml::events::{BytesEnd, BytesRef, BytesStart, BytesText, Event};
use quick_xml::{Reader, Writer};

use super::XmlError;

/// The namespace of the template markup; `xmlns:vgpud` declarations of it are not copied.
pub const TEMPLATE_NS: &str = "urn:vgpud:template:1";

/// Prefix of the template markup (`vgpud:if`, `vgpud:insert`).
const PREFIX: &str = "vgpud:";
/// Attribute that declares the `vgpud` prefix: dropped when it declares [`TEMPLATE_NS`].
const XMLNS: &str = "xmlns:vgpud";
/// Attribute that makes an element conditional.
const IF_ATTR: &str = "vgpud:if";
/// Element replaced by a list of fragments.
const INSERT_ELEMENT: &str = "vgpud:insert";

/// A named XML template: built in (see [`super::builtin`]) or supplied by the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    name: Cow<'static, str>,
    source: Cow<'static, str>,
}

impl Template {
    /// A template from a string; `name` (e.g. its file name) appears in errors.
    pub fn new(name: impl Into<String>, source: impl Into<String>) -> Self {
        Self {
            name: Cow::Owned(name.into()),
            source: Cow::Owned(source.into()),
        }
    }

    /// A template from static text, usable in constants.
    pub const fn from_static(name: &'static str, source: &'static str) -> Self {
        Self {
            name: Cow::Borrowed(name),
            source: Cow::Borrowed(source),
        }
    }

    /// The name used in errors.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The template text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Renders the template with the variables and fragment lists of `ctx`.
    pub fn render(&self, ctx: &Context) -> Result<String, XmlError> {
        let mut out = Emitter::new(&self.name);
        let mut reader = Reader::from_str(&self.source);
        let mode = Mode::Template(Vars::Context(ctx));
        copy_events(&mut reader, &mut out, &mode, &self.name)?;
        out.finish()
    }

    /// Checks the template's syntax and lists every variable and fragment list it refers
    /// to, in all branches (`vgpud:if` subtrees included).
    pub fn references(&self) -> Result<TemplateRefs, XmlError> {
        let refs = RefCell::new(TemplateRefs::default());
        {
            let mut out = Emitter::new(&self.name);
            let mut reader = Reader::from_str(&self.source);
            let mode = Mode::Template(Vars::Collect(&refs));
            copy_events(&mut reader, &mut out, &mode, &self.name)?;
            out.finish()?;
        }
        Ok(refs.into_inner())
    }
}

/// The names a template refers to, from [`Template::references`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TemplateRefs {
    /// Variables: `{name}`, `{name?}` and `vgpud:if="name"`.
    pub variables: BTreeSet<String>,
    /// Fragment lists: `<vgpud:insert name="…"/>`.
    pub lists: BTreeSet<String>,
}

/// Variables and fragment lists for [`Template::render`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Context {
    vars: BTreeMap<String, String>,
    lists: BTreeMap<String, Vec<String>>,
}

impl Context {
    /// An empty context: no variable set, no fragment list.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the variable `name`.
    pub fn set(&mut self, name: impl Into<String>, value: impl Into<String>) -> &mut Self {
        self.vars.insert(name.into(), value.into());
        self
    }

    /// Sets the variable `name` when `value` is `Some`, unsets it otherwise.
    pub fn set_opt(
        &mut self,
        name: impl Into<String>,
        value: Option<impl Into<String>>,
    ) -> &mut Self {
        let name = name.into();
        match value {
            Some(value) => {
                self.vars.insert(name, value.into());
            }
            None => {
                self.vars.remove(&name);
            }
        }
        self
    }

    /// The value of the variable `name`, if set.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }

    /// Sets the fragment list `name`, used by `<vgpud:insert name="…"/>`.
    pub fn set_fragments(&mut self, name: impl Into<String>, fragments: Vec<String>) -> &mut Self {
        self.lists.insert(name.into(), fragments);
        self
    }

    fn fragments(&self, name: &str) -> Option<&[String]> {
        self.lists.get(name).map(Vec::as_slice)
    }
}

/// Where a template's variables and fragment lists come from.
#[derive(Clone, Copy)]
enum Vars<'c> {
    /// Rendering: the values of a context.
    Context(&'c Context),
    /// Collecting the names a template uses: every variable reads as set (to ""), every
    /// list as empty, so that every branch is walked.
    Collect(&'c RefCell<TemplateRefs>),
}

impl<'c> Vars<'c> {
    fn get(self, name: &str) -> Option<&'c str> {
        match self {
            Self::Context(ctx) => ctx.get(name),
            Self::Collect(refs) => {
                refs.borrow_mut().variables.insert(name.to_owned());
                Some("")
            }
        }
    }

    fn fragments(self, name: &str) -> Option<&'c [String]> {
        match self {
            Self::Context(ctx) => ctx.fragments(name),
            Self::Collect(refs) => {
                refs.borrow_mut().lists.insert(name.to_owned());
                Some(&[])
            }
        }
    }
}

/// What the event loop is copying.
enum Mode<'c> {
    /// A template: placeholders and `vgpud:` markup are interpreted.
    Template(Vars<'c>),
    /// A fragment of an insert list: copied literally, `vgpud:` markup refused.
    Fragment { list: &'c str, index: usize },
}

/// The output side: a quick-xml writer that folds `<a></a>` into `<a/>`.
struct Emitter<'t> {
    template: &'t str,
    writer: Writer<Vec<u8>>,
    /// A start tag not yet written: it becomes an empty element if its end comes next.
    pending: Option<BytesStart<'static>>,
}

impl<'t> Emitter<'t> {
    fn new(template: &'t str) -> Self {
        Self {
            template,
            writer: Writer::new_with_indent(Vec::new(), b' ', 2),
            pending: None,
        }
    }

    fn write(&mut self, event: Event<'_>) -> Result<(), XmlError> {
        self.writer.write_event(event).map_err(|e| XmlError::Write {
            template: self.template.to_owned(),
            message: e.to_string(),
        })
    }

    fn flush_pending(&mut self) -> Result<(), XmlError> {
        match self.pending.take() {
            Some(start) => self.write(Event::Start(start)),
            None => Ok(()),
        }
    }

    fn start(&mut self, start: BytesStart<'static>) -> Result<(), XmlError> {
        self.flush_pending()?;
        self.pending = Some(start);
        Ok(())
    }

    fn end(&mut self, name: &str) -> Result<(), XmlError> {
        match self.pending.take() {
            Some(start) => self.write(Event::Empty(start)),
            None => self.write(Event::End(BytesEnd::new(name))),
        }
    }

    fn empty(&mut self, start: BytesStart<'_>) -> Result<(), XmlError> {
        self.flush_pending()?;
        self.write(Event::Empty(start))
    }

    fn text(&mut self, text: &str) -> Result<(), XmlError> {
        self.flush_pending()?;
        self.write(Event::Text(BytesText::new(text)))
    }

    fn finish(mut self) -> Result<String, XmlError> {
        self.flush_pending()?;
        let mut bytes = self.writer.into_inner();
        bytes.push(b'\n');
        String::from_utf8(bytes).map_err(|e| XmlError::Write {
            template: self.template.to_owned(),
            message: e.to_string(),
        })
    }
}

/// Copies the events of `reader` to `out` following `mode`. `template` names the template
/// being rendered, for errors.
fn copy_events(
    reader: &mut Reader<&[u8]>,
    out: &mut Emitter<'_>,
    mode: &Mode<'_>,
    template: &str,
) -> Result<(), XmlError> {
    let err = |message: String| match mode {
        Mode::Template(_) => XmlError::Template {
            template: template.to_owned(),
            message,
        },
        Mode::Fragment { list, index } => XmlError::Fragment {
            template: template.to_owned(),
            list: (*list).to_owned(),
            index: *index,
            message,
        },
    };
    let malformed = |reader: &Reader<&[u8]>, e: &dyn std::fmt::Display| {
        err(format!(
            "malformed XML at byte {}: {e}",
            reader.error_position()
        ))
    };

    // Elements still open, to close them and to detect unbalanced input, each with
    // whether `vgpud:` names are ordinary XML (not template markup) inside it.
    let mut open: Vec<(String, bool)> = Vec::new();
    // Text (with references resolved) collected until the next markup.
    let mut text = String::new();

    loop {
        let event = reader.read_event().map_err(|e| malformed(reader, &e))?;
        // Everything but character data ends the current text run.
        if !matches!(
            event,
            Event::Text(_) | Event::GeneralRef(_) | Event::CData(_) | Event::Comment(_)
        ) {
            flush_text(&mut text, out, mode, template, open.is_empty(), &err)?;
        }
        let inherited = open.last().is_some_and(|(_, literal)| *literal);
        match event {
            Event::Text(t) => text.push_str(&t.decode().map_err(|e| malformed(reader, &e))?),
            Event::CData(t) => text.push_str(&t.decode().map_err(|e| malformed(reader, &e))?),
            Event::GeneralRef(r) => text.push(resolve_reference(&r).map_err(&err)?),
            Event::Comment(_) | Event::Decl(_) | Event::PI(_) => {}
            Event::DocType(_) => return Err(err("a DOCTYPE is not allowed".to_owned())),
            Event::Start(e) => {
                let name = utf8(e.name().as_ref()).map_err(&err)?.to_owned();
                let literal = literal_scope(reader, &e, inherited, &err)?;
                if !literal && name.starts_with(PREFIX) {
                    return Err(err(format!(
                        "<{name}> must be an empty element (<{name} …/>)"
                    )));
                }
                match build_start(reader, &e, &name, mode, literal, template, &err)? {
                    Some(start) => {
                        out.start(start)?;
                        open.push((name, literal));
                    }
                    None => {
                        reader
                            .read_to_end(e.name())
                            .map_err(|e| malformed(reader, &e))?;
                    }
                }
            }
            Event::Empty(e) => {
                let name = utf8(e.name().as_ref()).map_err(&err)?.to_owned();
                let literal = literal_scope(reader, &e, inherited, &err)?;
                if !literal && name == INSERT_ELEMENT {
                    let Mode::Template(vars) = mode else {
                        return Err(err(format!("<{name}> is not allowed in a fragment")));
                    };
                    insert(reader, &e, *vars, out, template, &err)?;
                } else if !literal && name.starts_with(PREFIX) {
                    return Err(err(format!("unknown template element <{name}>")));
                } else if let Some(start) =
                    build_start(reader, &e, &name, mode, literal, template, &err)?
                {
                    out.empty(start)?;
                }
            }
            Event::End(e) => {
                let qname = e.name();
                let name = utf8(qname.as_ref()).map_err(&err)?;
                match open.pop() {
                    Some((expected, _)) if expected == name => out.end(name)?,
                    _ => return Err(err(format!("unexpected end tag </{name}>"))),
                }
            }
            Event::Eof => break,
        }
    }
    match open.last() {
        Some((name, _)) => Err(err(format!("<{name}> is not closed"))),
        None => Ok(()),
    }
}

/// Whether `vgpud:` names are ordinary XML in element `e` and below: `inherited` unless `e`
/// declares `xmlns:vgpud`, then whether that declaration is not [`TEMPLATE_NS`].
fn literal_scope(
    reader: &Reader<&[u8]>,
    e: &BytesStart<'_>,
    inherited: bool,
    err: &impl Fn(String) -> XmlError,
) -> Result<bool, XmlError> {
    let declared = e
        .try_get_attribute(XMLNS)
        .map_err(|e| err(format!("bad attribute: {e}")))?;
    let Some(attr) = declared else {
        return Ok(inherited);
    };
    let uri = attr
        .decode_and_unescape_value(reader.decoder())
        .map_err(|e| err(format!("bad value of {XMLNS}: {e}")))?;
    if uri.is_empty() {
        return Err(err(format!("{XMLNS} must not be empty")));
    }
    Ok(uri != TEMPLATE_NS)
}

/// Writes the collected text, trimmed, with placeholders replaced in template mode.
fn flush_text(
    text: &mut String,
    out: &mut Emitter<'_>,
    mode: &Mode<'_>,
    template: &str,
    at_top_level: bool,
    err: &impl Fn(String) -> XmlError,
) -> Result<(), XmlError> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        text.clear();
        return Ok(());
    }
    if at_top_level {
        return Err(err(format!("text outside an element: {trimmed:?}")));
    }
    match mode {
        Mode::Template(vars) => out.text(&substitute(trimmed, *vars, template)?)?,
        Mode::Fragment { .. } => out.text(trimmed)?,
    }
    text.clear();
    Ok(())
}

/// The start tag to write for `e`, or `None` when a `vgpud:if` condition is false.
/// `literal`: `vgpud:` attributes are ordinary XML here (see [`literal_scope`]).
fn build_start(
    reader: &Reader<&[u8]>,
    e: &BytesStart<'_>,
    name: &str,
    mode: &Mode<'_>,
    literal: bool,
    template: &str,
    err: &impl Fn(String) -> XmlError,
) -> Result<Option<BytesStart<'static>>, XmlError> {
    let mut start = BytesStart::new(name.to_owned());
    for attr in e.attributes() {
        let attr = attr.map_err(|e| err(format!("bad attribute in <{name}>: {e}")))?;
        let key = utf8(attr.key.as_ref()).map_err(err)?;
        let value = attr
            .decode_and_unescape_value(reader.decoder())
            .map_err(|e| err(format!("bad value of attribute {key} in <{name}>: {e}")))?;
        let vars = match mode {
            Mode::Template(vars) => *vars,
            Mode::Fragment { .. } => {
                if !literal && (key.starts_with(PREFIX) || key == XMLNS) {
                    return Err(err(format!("template attribute {key} in a fragment")));
                }
                start.push_attribute((key, value.as_ref()));
                continue;
            }
        };
        if key == XMLNS {
            // A namespace declaration is copied as written, never substituted.
            if literal {
                start.push_attribute((key, value.as_ref()));
            }
            continue;
        }
        if !literal && key == IF_ATTR {
            check_var_name(&value).map_err(|m| err(format!("{IF_ATTR}: {m}")))?;
            if vars.get(&value).is_none() {
                return Ok(None);
            }
            continue;
        }
        if !literal && key.starts_with(PREFIX) {
            return Err(err(format!("unknown template attribute {key} in <{name}>")));
        }
        if let Some(var) = optional_placeholder(&value) {
            check_var_name(var).map_err(|m| err(format!("attribute {key}: {m}")))?;
            if let Some(v) = vars.get(var) {
                check_value(v, template, var)?;
                start.push_attribute((key, v));
            }
            continue;
        }
        start.push_attribute((key, substitute(&value, vars, template)?.as_str()));
    }
    Ok(Some(start))
}

/// Replaces `<vgpud:insert name="list"/>` with the fragments of `list`.
fn insert(
    reader: &Reader<&[u8]>,
    e: &BytesStart<'_>,
    vars: Vars<'_>,
    out: &mut Emitter<'_>,
    template: &str,
    err: &impl Fn(String) -> XmlError,
) -> Result<(), XmlError> {
    let mut list = None;
    for attr in e.attributes() {
        let attr = attr.map_err(|e| err(format!("bad attribute in <{INSERT_ELEMENT}>: {e}")))?;
        let key = utf8(attr.key.as_ref()).map_err(err)?;
        match key {
            "name" => {
                let value = attr
                    .decode_and_unescape_value(reader.decoder())
                    .map_err(|e| err(format!("bad name in <{INSERT_ELEMENT}>: {e}")))?;
                list = Some(value.into_owned());
            }
            XMLNS => {}
            _ => {
                return Err(err(format!(
                    "unknown attribute {key} in <{INSERT_ELEMENT}>"
                )))
            }
        }
    }
    let list = list.ok_or_else(|| err(format!("<{INSERT_ELEMENT}> needs a name attribute")))?;
    let fragments = vars
        .fragments(&list)
        .ok_or_else(|| XmlError::UnknownInsert {
            template: template.to_owned(),
            name: list.clone(),
        })?;
    for (index, fragment) in fragments.iter().enumerate() {
        let mut fragment_reader = Reader::from_str(fragment);
        let mode = Mode::Fragment { list: &list, index };
        copy_events(&mut fragment_reader, out, &mode, template)?;
    }
    Ok(())
}

/// `Some(var)` when `value` is exactly `{var?}`.
fn optional_placeholder(value: &str) -> Option<&str> {
    value.strip_prefix('{')?.strip_suffix("?}")
}

/// Replaces `{var}` placeholders in `raw`; `{{` and `}}` are literal braces.
fn substitute(raw: &str, vars: Vars<'_>, template: &str) -> Result<String, XmlError> {
    let syntax = |message: String| XmlError::Template {
        template: template.to_owned(),
        message,
    };
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(i) = rest.find(['{', '}']) {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if let Some(after) = tail.strip_prefix("{{") {
            out.push('{');
            rest = after;
        } else if let Some(after) = tail.strip_prefix("}}") {
            out.push('}');
            rest = after;
        } else if let Some(after) = tail.strip_prefix('{') {
            let close = after
                .find('}')
                .ok_or_else(|| syntax(format!("unclosed placeholder in {raw:?}")))?;
            let var = &after[..close];
            if var.ends_with('?') {
                return Err(syntax(format!(
                    "{{{var}}} is only allowed as a whole attribute value"
                )));
            }
            check_var_name(var).map_err(|m| syntax(format!("in {raw:?}: {m}")))?;
            let value = vars.get(var).ok_or_else(|| XmlError::UnknownVariable {
                template: template.to_owned(),
                variable: var.to_owned(),
            })?;
            check_value(value, template, var)?;
            out.push_str(value);
            rest = &after[close + 1..];
        } else {
            return Err(syntax(format!("unmatched '}}' in {raw:?} (write '}}}}')")));
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// Variable names: ASCII letters, digits, `_`, `-` and `.`.
fn check_var_name(name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if valid {
        Ok(())
    } else {
        Err(format!("bad variable name {name:?}"))
    }
}

/// Refuses values that XML cannot carry faithfully: control characters (forbidden in
/// XML 1.0, or normalised away in attribute values) and the non-characters U+FFFE/U+FFFF.
fn check_value(value: &str, template: &str, variable: &str) -> Result<(), XmlError> {
    if value
        .chars()
        .any(|c| c.is_control() || c == '\u{FFFE}' || c == '\u{FFFF}')
    {
        return Err(XmlError::InvalidValue {
            template: template.to_owned(),
            variable: variable.to_owned(),
        });
    }
    Ok(())
}

/// The character of a predefined entity or character reference.
pub(super) fn resolve_reference(r: &BytesRef<'_>) -> Result<char, String> {
    if let Some(c) = r
        .resolve_char_ref()
        .map_err(|e| format!("bad character reference: {e}"))?
    {
        return Ok(c);
    }
    let name = r.decode().map_err(|e| e.to_string())?;
    match name.as_ref() {
        "lt" => Ok('<'),
        "gt" => Ok('>'),
        "amp" => Ok('&'),
        "apos" => Ok('\''),
        "quot" => Ok('"'),
        other => Err(format!("unknown entity &{other};")),
    }
}

fn utf8(bytes: &[u8]) -> Result<&str, String> {
    std::str::from_utf8(bytes).map_err(|e| format!("name is not UTF-8: {e}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn render(source: &str, ctx: &Context) -> Result<String, XmlError> {
        Template::new("test.xml", source).render(ctx)
    }

    #[test]
    fn placeholders_in_attributes_and_text() {
        let mut ctx = Context::new();
        ctx.set("a", "1").set("b", "two");
        let out = render("<x k='v{a}w'><y>{b} and {a}</y></x>", &ctx).unwrap();
        assert_eq!(out, "<x k=\"v1w\">\n  <y>two and 1</y>\n</x>\n");
    }

    #[test]
    fn braces_can_be_escaped() {
        let out = render("<x k='{{a}}'>}}{{</x>", &Context::new()).unwrap();
        assert_eq!(out, "<x k=\"{a}\">}{</x>\n");
    }

    #[test]
    fn optional_attribute_dropped_when_unset() {
        let mut ctx = Context::new();
        let tpl = "<x a='{a?}' b='{b?}' c='fixed'/>";
        assert_eq!(render(tpl, &ctx).unwrap(), "<x c=\"fixed\"/>\n");
        ctx.set("b", "on");
        assert_eq!(render(tpl, &ctx).unwrap(), "<x b=\"on\" c=\"fixed\"/>\n");
    }

    #[test]
    fn optional_marker_only_as_whole_attribute() {
        let err = render("<x a='pre{a?}'/>", &Context::new()).unwrap_err();
        assert!(matches!(err, XmlError::Template { .. }), "{err}");
    }

    #[test]
    fn vgpud_if_keeps_or_skips_subtree() {
        let tpl = "<r xmlns:vgpud='urn:vgpud:template:1'>\
                   <g vgpud:if='on' t='{t}'><c>{t}</c></g><e vgpud:if='on'/><k/></r>";
        let out = render(tpl, &Context::new()).unwrap();
        // Skipped subtrees may hold unset placeholders: they are never evaluated.
        assert_eq!(out, "<r>\n  <k/>\n</r>\n");
        let mut ctx = Context::new();
        ctx.set("on", "").set("t", "vnc");
        let out = render(tpl, &ctx).unwrap();
        assert_eq!(
            out,
            "<r>\n  <g t=\"vnc\">\n    <c>vnc</c>\n  </g>\n  <e/>\n  <k/>\n</r>\n"
        );
    }

    #[test]
    fn insert_reemits_fragments_indented() {
        let tpl = "<r><devices><vgpud:insert name='hostdevs'/><tail/></devices></r>";
        let mut ctx = Context::new();
        ctx.set_fragments(
            "hostdevs",
            vec![
                "<hostdev a=\"1\">\n<source><address x='&lt;'/></source></hostdev>\n".to_owned(),
                "<?xml version='1.0'?><!-- c --><hostdev a='2'/>".to_owned(),
            ],
        );
        let out = render(tpl, &ctx).unwrap();
        assert_eq!(
            out,
            "<r>\n  <devices>\n    <hostdev a=\"1\">\n      <source>\n        \
             <address x=\"&lt;\"/>\n      </source>\n    </hostdev>\n    \
             <hostdev a=\"2\"/>\n    <tail/>\n  </devices>\n</r>\n"
        );
    }

    #[test]
    fn empty_insert_collapses_parent() {
        let mut ctx = Context::new();
        ctx.set_fragments("l", Vec::new());
        let out = render("<r><d><vgpud:insert name='l'/></d></r>", &ctx).unwrap();
        assert_eq!(out, "<r>\n  <d/>\n</r>\n");
    }

    #[test]
    fn unknown_insert_list_is_an_error() {
        let err = render("<r><vgpud:insert name='nope'/></r>", &Context::new()).unwrap_err();
        assert!(
            matches!(&err, XmlError::UnknownInsert { template, name }
                if template == "test.xml" && name == "nope"),
            "{err}"
        );
    }

    #[test]
    fn malformed_fragment_is_an_error() {
        for bad in ["<hostdev>", "<a></b>", "text", "<a vgpud:if='x'/>", "</a>"] {
            let mut ctx = Context::new();
            ctx.set_fragments("l", vec!["<ok/>".to_owned(), bad.to_owned()]);
            let err = render("<r><vgpud:insert name='l'/></r>", &ctx).unwrap_err();
            assert!(
                matches!(&err, XmlError::Fragment { list, index: 1, .. } if list == "l"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn hostile_values_are_escaped() {
        let hostile = "<evil>&'\"</name><x y='";
        let mut ctx = Context::new();
        ctx.set("v", hostile);
        let out = render("<r a='{v}'><n>{v}</n></r>", &ctx).unwrap();
        assert_eq!(
            out,
            "<r a=\"&lt;evil&gt;&amp;&apos;&quot;&lt;/name&gt;&lt;x y=&apos;\">\n  \
             <n>&lt;evil&gt;&amp;&apos;&quot;&lt;/name&gt;&lt;x y=&apos;</n>\n</r>\n"
        );
        // Reading it back gives the original value, in the attribute and in the text.
        let mut reader = Reader::from_str(&out);
        let mut attr = None;
        let mut text = String::new();
        loop {
            match reader.read_event().unwrap() {
                Event::Start(e) if e.name().as_ref() == b"r" => {
                    let a = e.try_get_attribute("a").unwrap().unwrap();
                    attr = Some(a.unescape_value().unwrap().into_owned());
                }
                Event::Text(t) => text.push_str(&t.decode().unwrap()),
                Event::GeneralRef(r) => text.push(resolve_reference(&r).unwrap()),
                Event::Eof => break,
                _ => {}
            }
        }
        assert_eq!(attr.as_deref(), Some(hostile));
        assert_eq!(text.trim(), hostile);
    }

    #[test]
    fn control_characters_are_refused() {
        let mut ctx = Context::new();
        ctx.set("v", "a\u{1}b");
        let err = render("<r>{v}</r>", &ctx).unwrap_err();
        assert!(
            matches!(&err, XmlError::InvalidValue { variable, .. } if variable == "v"),
            "{err}"
        );
    }

    #[test]
    fn unknown_variable_names_template_and_variable() {
        for tpl in ["<r>{missing}</r>", "<r a='x{missing}'/>"] {
            let err = render(tpl, &Context::new()).unwrap_err();
            assert!(
                matches!(&err, XmlError::UnknownVariable { template, variable }
                    if template == "test.xml" && variable == "missing"),
                "{err}"
            );
            let msg = err.to_string();
            assert!(msg.contains("test.xml") && msg.contains("missing"), "{msg}");
        }
    }

    #[test]
    fn template_syntax_errors() {
        for tpl in [
            "<r>{open</r>",
            "<r>close}</r>",
            "<r>{bad name}</r>",
            "<r vgpud:unless='x'/>",
            "<r><vgpud:other/></r>",
            "<r><vgpud:insert name='l'></vgpud:insert></r>",
            "<r><vgpud:insert/></r>",
            "<r/>text",
            "<r>",
            "<!DOCTYPE r><r/>",
            "<r>&custom;</r>",
        ] {
            let mut ctx = Context::new();
            ctx.set_fragments("l", Vec::new());
            let err = render(tpl, &ctx).unwrap_err();
            assert!(matches!(err, XmlError::Template { .. }), "{tpl}: {err}");
        }
    }

    #[test]
    fn references_and_comments_in_templates() {
        let out = render(
            "<?xml version='1.0'?>\n<!-- doc -->\n<r a='&lt;&#65;'>x &amp; <!-- c -->y</r>\n",
            &Context::new(),
        )
        .unwrap();
        assert_eq!(out, "<r a=\"&lt;A\">x &amp; y</r>\n");
    }

    #[test]
    fn vgpud_bound_to_another_namespace_is_ordinary_xml() {
        let tpl = "<r xmlns:vgpud='urn:vgpud:template:1'>\
                   <vgpud:devices xmlns:vgpud='http://vgpud.org/xmlns/domain/1'>\
                   <vgpud:device vgpud:if='x' uuid='{u}'/></vgpud:devices>\
                   <k vgpud:if='absent'/></r>";
        let mut ctx = Context::new();
        ctx.set("u", "1");
        let out = render(tpl, &ctx).unwrap();
        assert_eq!(
            out,
            "<r>\n  <vgpud:devices xmlns:vgpud=\"http://vgpud.org/xmlns/domain/1\">\n    \
             <vgpud:device vgpud:if=\"x\" uuid=\"1\"/>\n  </vgpud:devices>\n</r>\n"
        );
    }

    #[test]
    fn fragments_may_carry_the_metadata_namespace_but_no_markup() {
        let meta = "<vgpud:devices xmlns:vgpud='http://vgpud.org/xmlns/domain/1'>\
                    <vgpud:device uuid='1'/></vgpud:devices>";
        let mut ctx = Context::new();
        ctx.set_fragments("l", vec![meta.to_owned()]);
        let out = render("<r><vgpud:insert name='l'/></r>", &ctx).unwrap();
        assert!(out.contains("<vgpud:device uuid=\"1\"/>"), "{out}");
        for bad in [
            "<a xmlns:vgpud='urn:vgpud:template:1' vgpud:if='x'/>",
            "<vgpud:insert name='l'/>",
            "<a xmlns:vgpud=''/>",
        ] {
            ctx.set_fragments("l", vec![bad.to_owned()]);
            let err = render("<r><vgpud:insert name='l'/></r>", &ctx).unwrap_err();
            assert!(matches!(err, XmlError::Fragment { .. }), "{bad}: {err}");
        }
    }

    #[test]
    fn references_walk_every_branch() {
        let tpl = Template::new(
            "refs.xml",
            "<r a='{a?}'><g vgpud:if='c'><x>{b}</x><vgpud:insert name='l'/></g>\
             <m xmlns:vgpud='urn:other'><vgpud:y z='{d}'/></m></r>",
        );
        let refs = tpl.references().unwrap();
        let names = |set: &BTreeSet<String>| set.iter().cloned().collect::<Vec<_>>();
        assert_eq!(names(&refs.variables), ["a", "b", "c", "d"]);
        assert_eq!(names(&refs.lists), ["l"]);
        let err = Template::new("bad.xml", "<r>{x</r>")
            .references()
            .unwrap_err();
        assert!(
            matches!(&err, XmlError::Template { template, .. } if template == "bad.xml"),
            "{err}"
        );
    }

    #[test]
    fn empty_value_keeps_element_on_one_line() {
        let mut ctx = Context::new();
        ctx.set("v", "");
        let out = render("<r><n>{v}</n></r>", &ctx).unwrap();
        assert_eq!(out, "<r>\n  <n></n>\n</r>\n");
    }
}
