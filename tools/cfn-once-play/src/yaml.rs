//! A CloudFormation template's text, YAML or JSON, read into a tree that remembers lines.
//!
//! `cfn-once play` must refuse what it does not support by file and line before it sends
//! anything, so every node and every map key keeps the line it was written on. The tree keeps
//! what CloudFormation keeps and nothing more: scalars stay text (CloudFormation sends every
//! scalar property of a custom resource as a string, so `1`, `true` and `2010-09-09` are the
//! text written), map keys keep their order, and the short-form tags (`!Ref x`, `!Sub ...`)
//! become the long form (`{Ref: x}`, `{Fn::Sub: ...}`), so nothing after this module knows
//! that short forms exist. What CloudFormation refuses (aliases, duplicate keys, unknown tags)
//! is refused here, naming its line.

use std::fmt;
use std::path::{Path, PathBuf};

use saphyr_parser::{Event, Parser, ScalarStyle, ScanError, Span, SpannedEventReceiver, Tag};

/// Something a play does not support or cannot resolve, where it is written and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub file: PathBuf,
    pub line: usize,
    pub construct: String,
    pub why: String,
}

impl Refusal {
    pub fn new(file: &Path, line: usize, construct: &str, why: String) -> Refusal {
        Refusal { file: file.to_path_buf(), line, construct: construct.to_string(), why }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}: {}", self.file.display(), self.line, self.construct, self.why)
    }
}

impl std::error::Error for Refusal {}

/// One value of the template and the line (1-based) where it starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub value: NodeValue,
    pub line: usize,
}

/// A template value. A scalar is its text as written; `null`, `~` and an empty value are
/// [`NodeValue::Null`] (written plainly, not quoted).
#[derive(Debug, Clone, PartialEq)]
pub enum NodeValue {
    Null,
    Scalar(String),
    Seq(Vec<Node>),
    Map(Vec<(Key, Node)>),
}

/// A map key and the line it is written on.
#[derive(Debug, Clone, PartialEq)]
pub struct Key {
    pub name: String,
    pub line: usize,
}

impl Node {
    /// The text of a scalar, `None` for anything else.
    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            NodeValue::Scalar(text) => Some(text),
            _ => None,
        }
    }

    /// The entries of a map, `None` for anything else.
    pub fn as_map(&self) -> Option<&[(Key, Node)]> {
        match &self.value {
            NodeValue::Map(entries) => Some(entries),
            _ => None,
        }
    }

    /// The items of a sequence, `None` for anything else.
    pub fn as_seq(&self) -> Option<&[Node]> {
        match &self.value {
            NodeValue::Seq(items) => Some(items),
            _ => None,
        }
    }

    /// The value under `name` when this node is a map that has it.
    pub fn get(&self, name: &str) -> Option<&Node> {
        self.as_map()?.iter().find(|(key, _)| key.name == name).map(|(_, value)| value)
    }

    /// The one entry of a map of exactly one entry: the shape of every intrinsic function.
    pub fn single_entry(&self) -> Option<(&Key, &Node)> {
        match self.as_map()? {
            [(key, value)] => Some((key, value)),
            _ => None,
        }
    }
}

/// The short-form tags CloudFormation defines, each as the long-form key it stands for. Those
/// `cfn-once play` does not evaluate are here too, so the checker can refuse them by name rather
/// than as an unknown tag.
const SHORT_FORMS: &[(&str, &str)] = &[
    ("Ref", "Ref"),
    ("Condition", "Condition"),
    ("GetAtt", "Fn::GetAtt"),
    ("Sub", "Fn::Sub"),
    ("Join", "Fn::Join"),
    ("Select", "Fn::Select"),
    ("Split", "Fn::Split"),
    ("If", "Fn::If"),
    ("Equals", "Fn::Equals"),
    ("And", "Fn::And"),
    ("Or", "Fn::Or"),
    ("Not", "Fn::Not"),
    ("FindInMap", "Fn::FindInMap"),
    ("GetAZs", "Fn::GetAZs"),
    ("ImportValue", "Fn::ImportValue"),
    ("Base64", "Fn::Base64"),
    ("Cidr", "Fn::Cidr"),
    ("Length", "Fn::Length"),
    ("ToJsonString", "Fn::ToJsonString"),
    ("Transform", "Fn::Transform"),
    ("ForEach", "Fn::ForEach"),
];

/// Reads a template's text into a [`Node`]. JSON is read as the YAML it also is, after its tab
/// characters become spaces: JSON allows tabs as indentation, YAML does not, and valid JSON has
/// tabs nowhere else (inside a string a tab is written `\t`), so no value changes and every
/// line keeps its number.
pub fn parse(path: &Path, text: &str) -> Result<Node, Refusal> {
    let text = if text.trim_start().starts_with('{') { text.replace('\t', " ") } else { text.to_string() };
    let mut builder = Builder::new(path);
    let loaded = Parser::new_from_str(&text).load(&mut builder, true);
    if let Some(refusal) = builder.refusal {
        return Err(refusal);
    }
    if let Err(error) = loaded {
        return Err(scan_refusal(path, &error));
    }
    Ok(builder.document.unwrap_or(Node { value: NodeValue::Null, line: 1 }))
}

fn scan_refusal(path: &Path, error: &ScanError) -> Refusal {
    Refusal::new(path, error.marker().line(), "YAML", error.info().to_string())
}

/// A collection being read, with the tag it was written with.
enum Frame {
    Seq { items: Vec<Node>, line: usize, tag: Option<String> },
    Map { entries: Vec<(Key, Node)>, key: Option<Key>, line: usize, tag: Option<String> },
}

/// Builds the tree from the parser's events. The receiver cannot stop the parser, so the first
/// refusal is kept and every later event ignored.
struct Builder<'a> {
    path: &'a Path,
    stack: Vec<Frame>,
    document: Option<Node>,
    documents: usize,
    refusal: Option<Refusal>,
}

impl<'a> Builder<'a> {
    fn new(path: &'a Path) -> Self {
        Builder { path, stack: Vec::new(), document: None, documents: 0, refusal: None }
    }

    fn event(&mut self, event: Event<'_>, line: usize) -> Result<(), Refusal> {
        match event {
            Event::DocumentStart(_) => {
                self.documents += 1;
                if self.documents > 1 {
                    return Err(self.refusal_at(
                        line,
                        "YAML document",
                        "a template is one YAML document: remove the second `---` and what follows",
                    ));
                }
            }
            Event::Alias(_) => {
                return Err(self.refusal_at(
                    line,
                    "YAML alias",
                    "CloudFormation does not accept YAML aliases: write the value out where it is used",
                ));
            }
            Event::Scalar(text, style, _, tag) => {
                let tag = self.tag_name(tag.as_deref(), line)?;
                let value = if tag.is_none() && style == ScalarStyle::Plain && is_null(&text) {
                    NodeValue::Null
                } else {
                    NodeValue::Scalar(text.into_owned())
                };
                self.finish(wrap(Node { value, line }, tag))?;
            }
            Event::SequenceStart(_, tag) => {
                let tag = self.tag_name(tag.as_deref(), line)?;
                self.stack.push(Frame::Seq { items: Vec::new(), line, tag });
            }
            Event::MappingStart(_, tag) => {
                let tag = self.tag_name(tag.as_deref(), line)?;
                self.stack.push(Frame::Map { entries: Vec::new(), key: None, line, tag });
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let node = match self.stack.pop() {
                    Some(Frame::Seq { items, line, tag }) => wrap(Node { value: NodeValue::Seq(items), line }, tag),
                    Some(Frame::Map { entries, line, tag, .. }) => {
                        wrap(Node { value: NodeValue::Map(entries), line }, tag)
                    }
                    None => return Ok(()),
                };
                self.finish(node)?;
            }
            Event::Nothing | Event::StreamStart | Event::StreamEnd | Event::DocumentEnd => {}
        }
        Ok(())
    }

    fn refusal_at(&self, line: usize, construct: &str, why: &str) -> Refusal {
        Refusal::new(self.path, line, construct, why.to_string())
    }

    /// The long-form key a tag stands for, `None` for no tag or a YAML core tag (`!!str`),
    /// which changes nothing CloudFormation sees.
    fn tag_name(&self, tag: Option<&Tag>, line: usize) -> Result<Option<String>, Refusal> {
        let Some(tag) = tag else { return Ok(None) };
        if tag.is_yaml_core_schema() {
            return Ok(None);
        }
        if tag.handle == "!"
            && let Some((_, long)) = SHORT_FORMS.iter().find(|(short, _)| *short == tag.suffix)
        {
            return Ok(Some((*long).to_string()));
        }
        Err(Refusal::new(
            self.path,
            line,
            &format!("tag {tag}"),
            "not a CloudFormation short form (such as !Ref, !GetAtt, !Sub)".to_string(),
        ))
    }

    /// Puts a finished node where it belongs: in the collection being read, or as the document.
    fn finish(&mut self, node: Node) -> Result<(), Refusal> {
        let path = self.path;
        match self.stack.last_mut() {
            None => self.document = Some(node),
            Some(Frame::Seq { items, .. }) => items.push(node),
            Some(Frame::Map { entries, key, .. }) => match key.take() {
                None => {
                    let Some(name) = node.as_str() else {
                        return Err(Refusal::new(
                            path,
                            node.line,
                            "map key",
                            "a key must be plain text, not a list, a map or a tagged value".to_string(),
                        ));
                    };
                    if let Some((first, _)) = entries.iter().find(|(k, _)| k.name == name) {
                        return Err(Refusal::new(
                            path,
                            node.line,
                            &format!("key {name}"),
                            format!("appears twice in one map (first on line {}): keep one", first.line),
                        ));
                    }
                    *key = Some(Key { name: name.to_string(), line: node.line });
                }
                Some(key) => entries.push((key, node)),
            },
        }
        Ok(())
    }
}

impl<'input> SpannedEventReceiver<'input> for Builder<'_> {
    fn on_event(&mut self, event: Event<'input>, span: Span) {
        if self.refusal.is_some() {
            return;
        }
        if let Err(refusal) = self.event(event, span.start.line()) {
            self.refusal = Some(refusal);
        }
    }
}

/// A tagged node as its long form: `!Sub x` is `{Fn::Sub: x}`, on the node's line.
fn wrap(node: Node, tag: Option<String>) -> Node {
    match tag {
        None => node,
        Some(name) => {
            let line = node.line;
            Node { value: NodeValue::Map(vec![(Key { name, line }, node)]), line }
        }
    }
}

fn is_null(text: &str) -> bool {
    matches!(text, "" | "~" | "null" | "Null" | "NULL")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Node, Refusal> {
        parse(Path::new("t.yaml"), text)
    }

    fn scalar(text: &str, line: usize) -> Node {
        Node { value: NodeValue::Scalar(text.to_string()), line }
    }

    #[test]
    fn scalars_keep_their_text_and_lines() {
        let node = read("a: 1\nb: true\nc: 2010-09-09\nd: ~\ne:\nf: 'null'\n").unwrap();
        let entries = node.as_map().unwrap();
        let names: Vec<_> = entries.iter().map(|(k, _)| (k.name.as_str(), k.line)).collect();
        assert_eq!(names, [("a", 1), ("b", 2), ("c", 3), ("d", 4), ("e", 5), ("f", 6)]);
        assert_eq!(entries[0].1, scalar("1", 1));
        assert_eq!(entries[1].1, scalar("true", 2));
        assert_eq!(entries[2].1, scalar("2010-09-09", 3));
        assert_eq!(entries[3].1.value, NodeValue::Null);
        assert_eq!(entries[4].1.value, NodeValue::Null);
        assert_eq!(entries[5].1, scalar("null", 6));
    }

    #[test]
    fn short_forms_become_long_forms() {
        let node = read("a: !Ref X\nb: !GetAtt [R, Data]\nc: !Condition C\nd: !GetAZs ''\n").unwrap();
        let ref_entry = node.get("a").unwrap().single_entry().unwrap();
        assert_eq!((ref_entry.0.name.as_str(), ref_entry.0.line), ("Ref", 1));
        assert_eq!(ref_entry.1, &scalar("X", 1));
        let get_att = node.get("b").unwrap().single_entry().unwrap();
        assert_eq!(get_att.0.name, "Fn::GetAtt");
        assert_eq!(get_att.1.as_seq().unwrap().len(), 2);
        assert_eq!(node.get("c").unwrap().single_entry().unwrap().0.name, "Condition");
        assert_eq!(node.get("d").unwrap().single_entry().unwrap().0.name, "Fn::GetAZs");
    }

    #[test]
    fn an_unknown_tag_is_refused_with_its_line() {
        let refusal = read("a: 1\nb: !Bogus x\n").unwrap_err();
        assert_eq!(refusal.line, 2);
        assert_eq!(refusal.construct, "tag !Bogus");
    }

    #[test]
    fn a_duplicate_key_is_refused_with_both_lines() {
        let refusal = read("a: 1\nb:\n  c: 1\n  c: 2\n").unwrap_err();
        assert_eq!(refusal.line, 4);
        assert_eq!(refusal.construct, "key c");
        assert!(refusal.why.contains("line 3"), "{refusal}");
    }

    #[test]
    fn an_alias_is_refused() {
        let refusal = read("a: &x 1\nb: *x\n").unwrap_err();
        assert_eq!((refusal.line, refusal.construct.as_str()), (2, "YAML alias"));
    }

    #[test]
    fn a_second_document_is_refused() {
        let refusal = read("a: 1\n---\nb: 2\n").unwrap_err();
        assert_eq!(refusal.construct, "YAML document");
    }

    #[test]
    fn a_syntax_error_names_its_line() {
        let refusal = read("a: 1\nb: [1, 2\nc: 3\n").unwrap_err();
        assert_eq!(refusal.construct, "YAML");
        assert!(refusal.line >= 2, "{refusal}");
    }

    #[test]
    fn tab_indented_json_reads_with_its_lines() {
        let text = "{\n\t\"a\": {\n\t\t\"b\": [1, \"x\\ty\"],\n\t\t\"c\": null\n\t}\n}\n";
        let node = read(text).unwrap();
        let a = node.get("a").unwrap();
        let b = a.get("b").unwrap().as_seq().unwrap();
        assert_eq!(b[0], scalar("1", 3));
        assert_eq!(b[1].as_str(), Some("x\ty"));
        assert_eq!(a.get("c").unwrap().value, NodeValue::Null);
        assert_eq!(a.as_map().unwrap()[1].0.line, 4);
    }

    #[test]
    fn map_order_is_kept() {
        let node = read("z: 1\na: 2\nm: 3\n").unwrap();
        let names: Vec<_> = node.as_map().unwrap().iter().map(|(k, _)| k.name.clone()).collect();
        assert_eq!(names, ["z", "a", "m"]);
    }
}
