//! The subset of DynamoDB's expression language the Lambdas send, parsed and
//! evaluated against in-memory items: update expressions (`SET` with `+`,
//! `-` and `if_not_exists`, `REMOVE`, `ADD`, `DELETE`) and condition
//! expressions (comparisons, `BETWEEN`, `IN`, `AND`/`OR`/`NOT`, parentheses,
//! `attribute_exists`, `attribute_not_exists`, `begins_with`, `contains`,
//! `size`). Names and values must all be defined and all be used, as
//! DynamoDB requires.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use zae_table::{Attr, Item};

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Word(String),
    Name(String),
    Value(String),
    Index(usize),
    Sym(&'static str),
}

fn tokenize(text: &str) -> Result<Vec<Token>, String> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    let word_char = |c: char| c.is_ascii_alphanumeric() || c == '_';
    while i < chars.len() {
        let c = chars[i];
        let rest: String = chars[i..chars.len().min(i + 2)].iter().collect();
        if c.is_whitespace() {
            i += 1;
        } else if let Some(sym) = ["<>", "<=", ">="].into_iter().find(|s| rest == *s) {
            tokens.push(Token::Sym(sym));
            i += 2;
        } else if let Some(sym) = ["(", ")", ",", ".", "=", "<", ">", "+", "-"]
            .into_iter()
            .find(|s| s.starts_with(c))
        {
            tokens.push(Token::Sym(sym));
            i += 1;
        } else if c == '[' {
            let end = chars[i..]
                .iter()
                .position(|c| *c == ']')
                .ok_or("unclosed [")?
                + i;
            let n: String = chars[i + 1..end].iter().collect();
            tokens.push(Token::Index(
                n.parse().map_err(|_| format!("bad index [{n}]"))?,
            ));
            i = end + 1;
        } else if c == '#' || c == ':' || word_char(c) {
            let start = i;
            i += 1;
            while i < chars.len() && word_char(chars[i]) {
                i += 1;
            }
            let text: String = chars[start..i].iter().collect();
            tokens.push(match c {
                '#' => Token::Name(text),
                ':' => Token::Value(text),
                _ => Token::Word(text),
            });
        } else {
            return Err(format!("unexpected character '{c}'"));
        }
    }
    Ok(tokens)
}

/// One step of a document path.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    Attr(String),
    Index(usize),
}

type Path = Vec<Step>;

#[derive(Debug, Clone)]
enum Operand {
    Path(Path),
    Value(Attr),
    Size(Path),
    IfNotExists(Path, Box<Operand>),
    Sum(Box<Operand>, &'static str, Box<Operand>),
}

#[derive(Debug, Clone)]
enum Cond {
    Or(Box<Cond>, Box<Cond>),
    And(Box<Cond>, Box<Cond>),
    Not(Box<Cond>),
    Compare(Operand, &'static str, Operand),
    Between(Operand, Operand, Operand),
    In(Operand, Vec<Operand>),
    Exists(Path, bool),
    BeginsWith(Path, Operand),
    Contains(Path, Operand),
}

/// A parser over one expression, resolving `#names` and `:values` and
/// recording which were used.
struct Parser<'a> {
    tokens: Vec<Token>,
    at: usize,
    names: &'a BTreeMap<String, String>,
    values: &'a BTreeMap<String, Attr>,
    used_names: BTreeSet<String>,
    used_values: BTreeSet<String>,
}

impl<'a> Parser<'a> {
    fn new(
        text: &str,
        names: &'a BTreeMap<String, String>,
        values: &'a BTreeMap<String, Attr>,
    ) -> Result<Self, String> {
        Ok(Parser {
            tokens: tokenize(text)?,
            at: 0,
            names,
            values,
            used_names: BTreeSet::new(),
            used_values: BTreeSet::new(),
        })
    }

    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn next(&mut self) -> Option<Token> {
        let token = self.tokens.get(self.at).cloned();
        self.at += 1;
        token
    }

    fn is_word(&self, word: &str) -> bool {
        matches!(self.peek(), Some(Token::Word(w)) if w.eq_ignore_ascii_case(word))
    }

    fn is_sym(&self, sym: &str) -> bool {
        matches!(self.peek(), Some(Token::Sym(s)) if *s == sym)
    }

    fn expect(&mut self, sym: &'static str) -> Result<(), String> {
        match self.next() {
            Some(Token::Sym(s)) if s == sym => Ok(()),
            other => Err(format!("expected '{sym}', found {other:?}")),
        }
    }

    fn name(&mut self, alias: &str) -> Result<String, String> {
        self.used_names.insert(alias.to_owned());
        self.names
            .get(alias)
            .cloned()
            .ok_or_else(|| format!("An expression attribute name used in the document path is not defined; attribute name: {alias}"))
    }

    fn path(&mut self) -> Result<Path, String> {
        let mut path = vec![self.segment()?];
        loop {
            match self.peek() {
                Some(Token::Sym(".")) => {
                    self.at += 1;
                    path.push(self.segment()?);
                }
                Some(Token::Index(i)) => {
                    path.push(Step::Index(*i));
                    self.at += 1;
                }
                _ => return Ok(path),
            }
        }
    }

    fn segment(&mut self) -> Result<Step, String> {
        match self.next() {
            Some(Token::Name(alias)) => Ok(Step::Attr(self.name(&alias)?)),
            Some(Token::Word(word)) => Ok(Step::Attr(word)),
            other => Err(format!("expected an attribute path, found {other:?}")),
        }
    }

    fn value(&mut self, placeholder: &str) -> Result<Attr, String> {
        self.used_values.insert(placeholder.to_owned());
        self.values
            .get(placeholder)
            .cloned()
            .ok_or_else(|| format!("An expression attribute value used in expression is not defined; attribute value: {placeholder}"))
    }

    fn function(&mut self, name: &str) -> bool {
        self.is_word(name) && self.tokens.get(self.at + 1) == Some(&Token::Sym("("))
    }

    fn operand(&mut self) -> Result<Operand, String> {
        if self.function("size") {
            self.at += 2;
            let path = self.path()?;
            self.expect(")")?;
            return Ok(Operand::Size(path));
        }
        if self.function("if_not_exists") {
            self.at += 2;
            let path = self.path()?;
            self.expect(",")?;
            let fallback = self.operand()?;
            self.expect(")")?;
            return Ok(Operand::IfNotExists(path, Box::new(fallback)));
        }
        match self.peek() {
            Some(Token::Value(placeholder)) => {
                let placeholder = placeholder.clone();
                self.at += 1;
                Ok(Operand::Value(self.value(&placeholder)?))
            }
            _ => Ok(Operand::Path(self.path()?)),
        }
    }

    fn condition(&mut self) -> Result<Cond, String> {
        let mut left = self.conjunction()?;
        while self.is_word("OR") {
            self.at += 1;
            left = Cond::Or(Box::new(left), Box::new(self.conjunction()?));
        }
        Ok(left)
    }

    fn conjunction(&mut self) -> Result<Cond, String> {
        let mut left = self.negation()?;
        while self.is_word("AND") {
            self.at += 1;
            left = Cond::And(Box::new(left), Box::new(self.negation()?));
        }
        Ok(left)
    }

    fn negation(&mut self) -> Result<Cond, String> {
        if self.is_word("NOT") {
            self.at += 1;
            return Ok(Cond::Not(Box::new(self.negation()?)));
        }
        self.primary()
    }

    fn primary(&mut self) -> Result<Cond, String> {
        if self.is_sym("(") {
            self.at += 1;
            let inner = self.condition()?;
            self.expect(")")?;
            return Ok(inner);
        }
        for (function, exists) in [("attribute_exists", true), ("attribute_not_exists", false)] {
            if self.function(function) {
                self.at += 2;
                let path = self.path()?;
                self.expect(")")?;
                return Ok(Cond::Exists(path, exists));
            }
        }
        for function in ["begins_with", "contains"] {
            if self.function(function) {
                self.at += 2;
                let path = self.path()?;
                self.expect(",")?;
                let operand = self.operand()?;
                self.expect(")")?;
                return Ok(if function == "contains" {
                    Cond::Contains(path, operand)
                } else {
                    Cond::BeginsWith(path, operand)
                });
            }
        }
        let left = self.operand()?;
        if self.is_word("BETWEEN") {
            self.at += 1;
            let low = self.operand()?;
            if !self.is_word("AND") {
                return Err("BETWEEN needs AND".into());
            }
            self.at += 1;
            return Ok(Cond::Between(left, low, self.operand()?));
        }
        if self.is_word("IN") {
            self.at += 1;
            self.expect("(")?;
            let mut options = vec![self.operand()?];
            while self.is_sym(",") {
                self.at += 1;
                options.push(self.operand()?);
            }
            self.expect(")")?;
            return Ok(Cond::In(left, options));
        }
        match self.next() {
            Some(Token::Sym(op)) if ["=", "<>", "<", "<=", ">", ">="].contains(&op) => {
                Ok(Cond::Compare(left, op, self.operand()?))
            }
            other => Err(format!("expected a comparison, found {other:?}")),
        }
    }

    fn done(&self) -> Result<(), String> {
        match self.peek() {
            None => Ok(()),
            Some(token) => Err(format!("unexpected {token:?}")),
        }
    }
}

/// What an update does to an item, in order.
#[derive(Debug, Clone)]
enum Action {
    Set(Path, Operand),
    Remove(Path),
    Add(Path, Attr),
    Delete(Path, Attr),
}

fn is_clause(parser: &Parser<'_>) -> bool {
    ["SET", "REMOVE", "ADD", "DELETE"]
        .iter()
        .any(|w| parser.is_word(w))
}

fn parse_update(parser: &mut Parser<'_>) -> Result<Vec<Action>, String> {
    let mut actions = Vec::new();
    while let Some(Token::Word(clause)) = parser.next() {
        let clause = clause.to_ascii_uppercase();
        loop {
            let path = parser.path()?;
            let action = match clause.as_str() {
                "SET" => {
                    parser.expect("=")?;
                    let mut value = parser.operand()?;
                    for op in ["+", "-"] {
                        if parser.is_sym(op) {
                            parser.at += 1;
                            value = Operand::Sum(Box::new(value), op, Box::new(parser.operand()?));
                        }
                    }
                    Action::Set(path, value)
                }
                "REMOVE" => Action::Remove(path),
                "ADD" | "DELETE" => match parser.next() {
                    Some(Token::Value(placeholder)) => {
                        let value = parser.value(&placeholder)?;
                        if clause == "ADD" {
                            Action::Add(path, value)
                        } else {
                            Action::Delete(path, value)
                        }
                    }
                    other => return Err(format!("{clause} needs a value, found {other:?}")),
                },
                other => return Err(format!("unknown clause {other}")),
            };
            actions.push(action);
            if parser.is_sym(",") {
                parser.at += 1;
                continue;
            }
            break;
        }
        if parser.peek().is_some() && !is_clause(parser) {
            return Err(format!("unexpected {:?}", parser.peek()));
        }
    }
    if parser.peek().is_some() {
        return Err("an update expression starts with SET, REMOVE, ADD or DELETE".into());
    }
    Ok(actions)
}

/// A parsed update with its optional condition, checked as DynamoDB checks
/// them before running either.
pub struct Compiled {
    actions: Vec<Action>,
    condition: Option<Cond>,
}

/// Parses an update (may be empty) and a condition sharing one set of names
/// and values; every name and value must be used.
pub fn compile(
    update: Option<&str>,
    condition: Option<&str>,
    names: &BTreeMap<String, String>,
    values: &BTreeMap<String, Attr>,
) -> Result<Compiled, String> {
    let mut used_names = BTreeSet::new();
    let mut used_values = BTreeSet::new();
    let mut actions = Vec::new();
    if let Some(text) = update {
        let mut parser = Parser::new(text, names, values)?;
        actions = parse_update(&mut parser)?;
        check_overlaps(&actions)?;
        used_names.extend(parser.used_names);
        used_values.extend(parser.used_values);
    }
    let mut parsed = None;
    if let Some(text) = condition {
        let mut parser = Parser::new(text, names, values)?;
        parsed = Some(parser.condition()?);
        parser.done()?;
        used_names.extend(parser.used_names);
        used_values.extend(parser.used_values);
    }
    let unused_names: Vec<&String> = names.keys().filter(|n| !used_names.contains(*n)).collect();
    if !unused_names.is_empty() {
        return Err(format!(
            "Value provided in ExpressionAttributeNames unused in expressions: keys: {unused_names:?}"
        ));
    }
    let unused_values: Vec<&String> = values
        .keys()
        .filter(|v| !used_values.contains(*v))
        .collect();
    if !unused_values.is_empty() {
        return Err(format!(
            "Value provided in ExpressionAttributeValues unused in expressions: keys: {unused_values:?}"
        ));
    }
    Ok(Compiled {
        actions,
        condition: parsed,
    })
}

fn check_overlaps(actions: &[Action]) -> Result<(), String> {
    let paths: Vec<&Path> = actions
        .iter()
        .map(|a| match a {
            Action::Set(p, _) | Action::Remove(p) | Action::Add(p, _) | Action::Delete(p, _) => p,
        })
        .collect();
    for (i, a) in paths.iter().enumerate() {
        for b in &paths[i + 1..] {
            let shared = a.len().min(b.len());
            if a[..shared] == b[..shared] {
                return Err(format!(
                    "Two document paths overlap with each other: {a:?} and {b:?}"
                ));
            }
        }
        if let Some(Step::Attr(first)) = a.first()
            && (first == "PK" || first == "SK")
        {
            return Err(format!(
                "Cannot update attribute {first}. This attribute is part of the key"
            ));
        }
    }
    Ok(())
}

fn resolve<'i>(item: &'i Item, path: &Path) -> Option<&'i Attr> {
    let (Step::Attr(first), rest) = path.split_first()? else {
        return None;
    };
    let mut at = item.get(first)?;
    for step in rest {
        at = match (step, at) {
            (Step::Attr(name), Attr::M(map)) => map.get(name)?,
            (Step::Index(i), Attr::L(list)) => list.get(*i)?,
            _ => return None,
        };
    }
    Some(at)
}

fn number(attr: &Attr) -> Option<f64> {
    match attr {
        Attr::N(n) => n.parse().ok(),
        _ => None,
    }
}

fn integer(attr: &Attr) -> Option<i128> {
    match attr {
        Attr::N(n) => n.parse().ok(),
        _ => None,
    }
}

fn compare(a: &Attr, b: &Attr) -> Option<Ordering> {
    match (a, b) {
        (Attr::N(_), Attr::N(_)) => match (integer(a), integer(b)) {
            (Some(x), Some(y)) => Some(x.cmp(&y)),
            _ => number(a)?.partial_cmp(&number(b)?),
        },
        (Attr::S(x), Attr::S(y)) => Some(x.as_bytes().cmp(y.as_bytes())),
        _ => a.same(b).then_some(Ordering::Equal),
    }
}

fn operand(item: &Item, operand: &Operand) -> Result<Option<Attr>, String> {
    Ok(match operand {
        Operand::Path(path) => resolve(item, path).cloned(),
        Operand::Value(value) => Some(value.clone()),
        Operand::Size(path) => resolve(item, path).and_then(|attr| {
            let size = match attr {
                Attr::S(s) => s.len(),
                Attr::L(l) => l.len(),
                Attr::M(m) => m.len(),
                Attr::Ss(s) => s.len(),
                _ => return None,
            };
            Some(Attr::n(size))
        }),
        Operand::IfNotExists(path, fallback) => match resolve(item, path) {
            Some(found) => Some(found.clone()),
            None => self::operand(item, fallback)?,
        },
        Operand::Sum(a, op, b) => {
            let (a, b) = (self::operand(item, a)?, self::operand(item, b)?);
            let (Some(x), Some(y)) = (a.as_ref().and_then(integer), b.as_ref().and_then(integer))
            else {
                return Err(
                    "An operand in the update expression has an incorrect data type".into(),
                );
            };
            let sum = if *op == "+" {
                x.checked_add(y)
            } else {
                x.checked_sub(y)
            };
            Some(Attr::n(sum.ok_or("Number overflow")?))
        }
    })
}

fn holds(item: &Item, cond: &Cond) -> Result<bool, String> {
    Ok(match cond {
        Cond::Or(a, b) => holds(item, a)? || holds(item, b)?,
        Cond::And(a, b) => holds(item, a)? && holds(item, b)?,
        Cond::Not(inner) => !holds(item, inner)?,
        Cond::Exists(path, exists) => resolve(item, path).is_some() == *exists,
        Cond::Compare(a, op, b) => {
            let (Some(a), Some(b)) = (operand(item, a)?, operand(item, b)?) else {
                // An absent operand equals nothing: only `<>` holds.
                return Ok(*op == "<>");
            };
            let order = compare(&a, &b);
            match *op {
                "=" => order == Some(Ordering::Equal),
                "<>" => order != Some(Ordering::Equal),
                "<" => order == Some(Ordering::Less),
                "<=" => matches!(order, Some(Ordering::Less | Ordering::Equal)),
                ">" => order == Some(Ordering::Greater),
                _ => matches!(order, Some(Ordering::Greater | Ordering::Equal)),
            }
        }
        Cond::Between(a, low, high) => {
            let (Some(a), Some(low), Some(high)) =
                (operand(item, a)?, operand(item, low)?, operand(item, high)?)
            else {
                return Ok(false);
            };
            matches!(compare(&a, &low), Some(Ordering::Greater | Ordering::Equal))
                && matches!(compare(&a, &high), Some(Ordering::Less | Ordering::Equal))
        }
        Cond::In(a, options) => {
            let Some(a) = operand(item, a)? else {
                return Ok(false);
            };
            let mut found = false;
            for option in options {
                found |= operand(item, option)?
                    .is_some_and(|o| compare(&a, &o) == Some(Ordering::Equal));
            }
            found
        }
        Cond::BeginsWith(path, prefix) => match (resolve(item, path), operand(item, prefix)?) {
            (Some(Attr::S(s)), Some(Attr::S(p))) => s.starts_with(p.as_str()),
            _ => false,
        },
        Cond::Contains(path, needle) => match (resolve(item, path), operand(item, needle)?) {
            (Some(Attr::S(s)), Some(Attr::S(n))) => s.contains(n.as_str()),
            (Some(Attr::Ss(set)), Some(Attr::S(n))) => set.contains(&n),
            (Some(Attr::L(list)), Some(n)) => list.iter().any(|x| x.same(&n)),
            _ => false,
        },
    })
}

/// The parent map of a path's last step, made mutable; an error where
/// DynamoDB would refuse the path.
fn parent<'i>(
    item: &'i mut Item,
    path: &Path,
) -> Result<(&'i mut BTreeMap<String, Attr>, String), String> {
    let invalid =
        || "The document path provided in the update expression is invalid for update".to_owned();
    let Some((Step::Attr(last), init)) = path.split_last() else {
        return Err(invalid());
    };
    let mut map = item;
    for step in init {
        let Step::Attr(name) = step else {
            return Err(invalid());
        };
        map = match map.get_mut(name) {
            Some(Attr::M(inner)) => inner,
            _ => return Err(invalid()),
        };
    }
    Ok((map, last.clone()))
}

impl Compiled {
    /// Whether the condition (if any) holds for `item`.
    pub fn condition_holds(&self, item: &Item) -> Result<bool, String> {
        match &self.condition {
            Some(cond) => holds(item, cond),
            None => Ok(true),
        }
    }

    /// The item after the update's actions. Operands read the item as it
    /// was before the update, as DynamoDB's do.
    pub fn apply(&self, before: &Item) -> Result<Item, String> {
        let mut item = before.clone();
        for action in &self.actions {
            match action {
                Action::Set(path, value) => {
                    let value = operand(before, value)?.ok_or(
                        "The provided expression refers to an attribute that does not exist in the item",
                    )?;
                    let (map, name) = parent(&mut item, path)?;
                    map.insert(name, value);
                }
                Action::Remove(path) => {
                    if let Ok((map, name)) = parent(&mut item, path) {
                        map.remove(&name);
                    }
                }
                Action::Add(path, value) => {
                    let (map, name) = parent(&mut item, path)?;
                    let merged =
                        match (map.get(&name), value) {
                            (None, value) => value.clone(),
                            (Some(old @ Attr::N(_)), Attr::N(_)) => {
                                let (x, y) = (
                                    integer(old).ok_or("not an integer")?,
                                    integer(value).ok_or("not an integer")?,
                                );
                                Attr::n(x.checked_add(y).ok_or("Number overflow")?)
                            }
                            (Some(Attr::Ss(old)), Attr::Ss(new)) => {
                                Attr::Ss(old.union(new).cloned().collect())
                            }
                            _ => return Err(
                                "An operand in the update expression has an incorrect data type"
                                    .into(),
                            ),
                        };
                    map.insert(name, merged);
                }
                Action::Delete(path, value) => {
                    let (map, name) = parent(&mut item, path)?;
                    if let (Some(Attr::Ss(old)), Attr::Ss(gone)) = (map.get(&name), value) {
                        let left: BTreeSet<String> = old.difference(gone).cloned().collect();
                        if left.is_empty() {
                            map.remove(&name);
                        } else {
                            map.insert(name, Attr::Ss(left));
                        }
                    }
                }
            }
        }
        Ok(item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    fn values(pairs: &[(&str, Attr)]) -> BTreeMap<String, Attr> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.clone()))
            .collect()
    }

    #[test]
    fn updates_set_add_remove_and_delete_nested_paths() {
        let compiled = compile(
            Some("SET #o.#t = :e, n = if_not_exists(n, :z) ADD c :one, s :set REMOVE gone DELETE d :set"),
            Some("attribute_exists(#o) AND (attribute_not_exists(#o.#t) OR #o.#t.#l < :now)"),
            &names(&[("#o", "owners"), ("#t", "tok"), ("#l", "lease")]),
            &values(&[
                (":e", Attr::M(Item::from([("lease".into(), Attr::n(5))]))),
                (":z", Attr::n(0)),
                (":one", Attr::n(1)),
                (":set", Attr::Ss(BTreeSet::from(["x".to_owned()]))),
                (":now", Attr::n(10)),
            ]),
        )
        .unwrap();
        let before = Item::from([
            ("owners".into(), Attr::M(Item::new())),
            ("c".into(), Attr::n(41)),
            ("gone".into(), Attr::Bool(true)),
            ("d".into(), Attr::Ss(BTreeSet::from(["x".to_owned()]))),
        ]);
        assert!(compiled.condition_holds(&before).unwrap());
        let after = compiled.apply(&before).unwrap();
        assert_eq!(after["c"], Attr::n(42));
        assert_eq!(after["n"], Attr::n(0));
        assert!(!after.contains_key("gone") && !after.contains_key("d"));
        let Attr::M(owners) = &after["owners"] else {
            panic!()
        };
        assert_eq!(
            owners["tok"],
            Attr::M(Item::from([("lease".into(), Attr::n(5))]))
        );
        assert!(!compiled.condition_holds(&Item::new()).unwrap());
    }

    #[test]
    fn unused_and_undefined_names_and_values_are_refused_as_dynamodb_does() {
        let none = BTreeMap::new();
        let no_names = BTreeMap::new();
        assert!(compile(Some("SET #a = :v"), None, &names(&[("#a", "a")]), &none).is_err());
        let err = compile(
            Some("SET a = :v"),
            None,
            &names(&[("#x", "x")]),
            &values(&[(":v", Attr::n(1))]),
        )
        .err()
        .unwrap();
        assert!(err.contains("unused"), "{err}");
        assert!(
            compile(
                Some("SET PK = :v"),
                None,
                &no_names,
                &values(&[(":v", Attr::n(1))])
            )
            .is_err()
        );
        assert!(
            compile(
                Some("SET o = :v, o.t = :v"),
                None,
                &no_names,
                &values(&[(":v", Attr::n(1))])
            )
            .is_err()
        );
    }

    #[test]
    fn comparisons_order_numbers_as_numbers_and_strings_as_bytes() {
        let compiled = compile(
            None,
            Some("n < :ten AND s > :a AND size(s) = :two AND NOT m = :a AND k IN (:a, :ten)"),
            &BTreeMap::new(),
            &values(&[
                (":ten", Attr::n(10)),
                (":a", Attr::s("a")),
                (":two", Attr::n(2)),
            ]),
        )
        .unwrap();
        let item = Item::from([
            ("n".into(), Attr::n(9)),
            ("s".into(), Attr::s("ab")),
            ("m".into(), Attr::s("b")),
            ("k".into(), Attr::n("10.0")),
        ]);
        assert!(compiled.condition_holds(&item).unwrap());
    }
}
