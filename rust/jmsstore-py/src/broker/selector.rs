//! `NativeSelector`: a selector compiled by `jmsstore.selector` (its
//! `Selector.tree`) turned into the core's `broker::selector::Selector`.
//! This file only converts: a malformed tree is an `InvalidArgumentError`
//! naming the node, never a panic; evaluation is the core's.

use std::sync::Arc;

use jmsstore_core::broker::format::Value;
use jmsstore_core::broker::selector::{
    ArithmeticOp, CompareOp, Expr, HeaderField, Identifier, InList, LikePattern, Literal, MessageFields, Selector,
    MAX_DEPTH,
};
use jmsstore_core::{Error, Result as CoreResult};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyString, PyTuple};

use crate::errors::{PyResult2, PyStoreError};

/// A selector the Rust core evaluates; made from `Selector.tree`.
#[pyclass(module = "jmsstore._native", frozen)]
pub struct NativeSelector {
    /// Shared, so that the core can keep it with a consumer.
    pub selector: Arc<Selector>,
}

fn invalid(reason: impl Into<String>) -> PyStoreError {
    PyStoreError(Error::invalid(reason))
}

fn type_name(value: &Bound<'_, PyAny>) -> String {
    value.get_type().name().map_or_else(|_| "?".to_string(), |name| name.to_string())
}

fn text<'a>(value: &'a Bound<'_, PyAny>, what: &str) -> PyResult2<&'a str> {
    let s = value.cast::<PyString>().map_err(|_| invalid(format!("{what} is a str, not {}", type_name(value))))?;
    s.to_str().map_err(|_| invalid(format!("{what} is not valid Unicode (a lone surrogate?)")))
}

fn flag(value: &Bound<'_, PyAny>, what: &str) -> PyResult2<bool> {
    let b = value.cast::<PyBool>().map_err(|_| invalid(format!("{what} is a bool, not {}", type_name(value))))?;
    Ok(b.is_true())
}

/// The items after a node's tag, checked to be `expected` many (or at least
/// `expected` when `variadic`).
fn operands<'py>(
    node: &Bound<'py, PyTuple>,
    tag: &str,
    expected: usize,
    variadic: bool,
) -> PyResult2<Vec<Bound<'py, PyAny>>> {
    let items: Vec<_> = node.iter().skip(1).collect();
    let fits = if variadic { items.len() >= expected } else { items.len() == expected };
    if !fits {
        let count = if variadic { format!("at least {expected}") } else { expected.to_string() };
        return Err(invalid(format!("a {tag:?} node has {count} items after its tag, not {}", items.len())));
    }
    Ok(items)
}

/// The one item after a node's tag.
fn single<'py>(node: &Bound<'py, PyTuple>, tag: &str) -> PyResult2<Bound<'py, PyAny>> {
    let mut items = operands(node, tag, 1, false)?;
    items.pop().ok_or_else(|| invalid(format!("a {tag:?} node has no operand")))
}

/// The expression of a tree node `depth` levels down (the root is 1).
/// Recursion is bounded: a node deeper than the core accepts is refused
/// before its operands are looked at.
fn expr(node: &Bound<'_, PyAny>, depth: usize) -> PyResult2<Expr> {
    if depth > MAX_DEPTH {
        return Err(invalid(format!("a selector tree may be at most {MAX_DEPTH} levels deep")));
    }
    let node = node
        .cast::<PyTuple>()
        .map_err(|_| invalid(format!("a selector tree node is a tuple, not {}", type_name(node))))?;
    let tag_item = node.get_item(0).map_err(|_| invalid("a selector tree node is an empty tuple"))?;
    let tag = text(&tag_item, "a selector tree node's tag")?;
    let sub = |e: &Bound<'_, PyAny>| expr(e, depth + 1).map(Box::new);
    Ok(match tag {
        "lit" => Expr::Literal(literal(&single(node, tag)?)?),
        "header" => {
            let item = single(node, tag)?;
            let name = text(&item, "a header name")?;
            let field = HeaderField::from_name(name).ok_or_else(|| invalid(format!("{name:?} is no header field")))?;
            Expr::Identifier(Identifier::Header(field))
        }
        "prop" => {
            let item = single(node, tag)?;
            Expr::Identifier(Identifier::Property(text(&item, "a property name")?.into()))
        }
        "not" => Expr::Not(sub(&single(node, tag)?)?),
        "neg" => Expr::Negate(sub(&single(node, tag)?)?),
        "pos" => Expr::Plus(sub(&single(node, tag)?)?),
        "and" | "or" => {
            let items = operands(node, tag, 1, true)?;
            let list = items.iter().map(|e| expr(e, depth + 1)).collect::<PyResult2<Vec<_>>>()?;
            if tag == "and" {
                Expr::And(list)
            } else {
                Expr::Or(list)
            }
        }
        "cmp" => {
            let items = operands(node, tag, 3, false)?;
            let symbol = text(&items[0], "a comparison operator")?;
            let op = CompareOp::from_symbol(symbol)
                .ok_or_else(|| invalid(format!("{symbol:?} is no comparison operator")))?;
            Expr::Compare(op, sub(&items[1])?, sub(&items[2])?)
        }
        "arith" => {
            let items = operands(node, tag, 1, true)?;
            let first = sub(&items[0])?;
            let mut rest = Vec::with_capacity(items.len() - 1);
            for step in &items[1..] {
                let pair = step
                    .cast::<PyTuple>()
                    .ok()
                    .filter(|pair| pair.len() == 2)
                    .ok_or_else(|| invalid("an \"arith\" step is an (operator, operand) pair"))?;
                let symbol_item = pair.get_item(0).map_err(|e| invalid(e.to_string()))?;
                let symbol = text(&symbol_item, "an arithmetic operator")?;
                let op = ArithmeticOp::from_symbol(symbol)
                    .ok_or_else(|| invalid(format!("{symbol:?} is no arithmetic operator")))?;
                let operand = pair.get_item(1).map_err(|e| invalid(e.to_string()))?;
                rest.push((op, expr(&operand, depth + 1)?));
            }
            Expr::Arithmetic(first, rest)
        }
        "between" => {
            let items = operands(node, tag, 4, false)?;
            Expr::Between {
                operand: sub(&items[0])?,
                low: sub(&items[1])?,
                high: sub(&items[2])?,
                negated: flag(&items[3], "BETWEEN's negated")?,
            }
        }
        "in" => {
            let items = operands(node, tag, 3, false)?;
            let strings = items[1]
                .cast::<PyTuple>()
                .map_err(|_| invalid(format!("an IN list is a tuple, not {}", type_name(&items[1]))))?;
            let mut values = Vec::with_capacity(strings.len());
            for s in strings.iter() {
                values.push(text(&s, "an IN list item")?.to_string());
            }
            Expr::In { operand: sub(&items[0])?, list: InList::new(values), negated: flag(&items[2], "IN's negated")? }
        }
        "like" => {
            let items = operands(node, tag, 4, false)?;
            let pattern = text(&items[1], "a LIKE pattern")?;
            let escape = if items[2].is_none() {
                None
            } else {
                let mut chars = text(&items[2], "an ESCAPE character")?.chars();
                match (chars.next(), chars.next()) {
                    (Some(c), None) => Some(c),
                    _ => return Err(invalid("an ESCAPE character is one character")),
                }
            };
            Expr::Like {
                operand: sub(&items[0])?,
                pattern: LikePattern::new(pattern, escape)?,
                negated: flag(&items[3], "LIKE's negated")?,
            }
        }
        "is_null" => {
            let items = operands(node, tag, 2, false)?;
            Expr::IsNull { operand: sub(&items[0])?, negated: flag(&items[1], "IS NULL's negated")? }
        }
        other => return Err(invalid(format!("{other:?} is no selector tree node"))),
    })
}

fn literal(value: &Bound<'_, PyAny>) -> PyResult2<Literal> {
    if let Ok(b) = value.cast::<PyBool>() {
        Ok(Literal::Bool(b.is_true()))
    } else if value.is_instance_of::<PyInt>() {
        let long = value.extract::<i64>().map_err(|_| invalid("an integer literal is outside the range of a long"))?;
        Ok(Literal::Long(long))
    } else if value.is_instance_of::<PyFloat>() {
        Ok(Literal::Double(value.extract::<f64>().map_err(|e| invalid(e.to_string()))?))
    } else if value.is_instance_of::<PyString>() {
        Ok(Literal::String(text(value, "a string literal")?.into()))
    } else {
        Err(invalid(format!("a literal is a bool, int, float or str, not {}", type_name(value))))
    }
}

/// A header field's or property's value, converted from Python.
enum Owned {
    Null,
    Bool(bool),
    Long(i64),
    Double(f64),
    Text(String),
    /// Any other object (bytes, ...): not NULL, but no operator applies to it.
    Other,
}

impl Owned {
    fn of(name: &str, value: Option<Bound<'_, PyAny>>) -> PyResult2<Owned> {
        let Some(value) = value else { return Ok(Owned::Null) };
        Ok(if value.is_none() {
            Owned::Null
        } else if let Ok(b) = value.cast::<PyBool>() {
            Owned::Bool(b.is_true())
        } else if value.is_instance_of::<PyInt>() {
            Owned::Long(value.extract::<i64>().map_err(|_| invalid(format!("{name}: an int outside the long range")))?)
        } else if value.is_instance_of::<PyFloat>() {
            Owned::Double(value.extract::<f64>().map_err(|e| invalid(e.to_string()))?)
        } else if value.is_instance_of::<PyString>() {
            Owned::Text(text(&value, name)?.to_string())
        } else {
            Owned::Other
        })
    }

    fn value(&self) -> Value<'_> {
        match self {
            Owned::Null => Value::Null,
            Owned::Bool(v) => Value::Bool(*v),
            Owned::Long(v) => Value::Long(*v),
            Owned::Double(v) => Value::Double(*v),
            Owned::Text(v) => Value::String(v),
            // Bytes behave as every other non-null value no operator takes.
            Owned::Other => Value::Bytes(&[]),
        }
    }
}

/// The values of the selector's identifiers, read from the dicts once.
struct DictFields {
    headers: Vec<(HeaderField, Owned)>,
    properties: Vec<(Box<str>, Owned)>,
}

impl DictFields {
    fn read(selector: &Selector, headers: &Bound<'_, PyDict>, properties: &Bound<'_, PyDict>) -> PyResult2<Self> {
        let mut fields = DictFields { headers: Vec::new(), properties: Vec::new() };
        fn get<'py>(dict: &Bound<'py, PyDict>, name: &str) -> PyResult2<Option<Bound<'py, PyAny>>> {
            dict.get_item(name).map_err(|e| invalid(e.to_string()))
        }
        for identifier in selector.identifiers() {
            match identifier {
                Identifier::Header(field) => {
                    let value = Owned::of(field.name(), get(headers, field.name())?)?;
                    fields.headers.push((*field, value));
                }
                Identifier::Property(name) => {
                    let value = Owned::of(name, get(properties, name)?)?;
                    fields.properties.push((name.clone(), value));
                }
            }
        }
        Ok(fields)
    }
}

impl MessageFields for DictFields {
    fn header(&self, field: HeaderField) -> CoreResult<Value<'_>> {
        Ok(self.headers.iter().find(|(f, _)| *f == field).map_or(Value::Null, |(_, v)| v.value()))
    }

    fn property(&self, name: &str) -> CoreResult<Option<Value<'_>>> {
        Ok(self.properties.iter().find(|(n, _)| &**n == name).map(|(_, v)| v.value()))
    }
}

#[pymethods]
impl NativeSelector {
    /// Compiles `tree` (a `Selector.tree`); `InvalidArgumentError` if it is malformed.
    #[new]
    fn new(tree: &Bound<'_, PyAny>) -> PyResult2<Self> {
        Ok(NativeSelector { selector: Arc::new(Selector::new(expr(tree, 1)?)?) })
    }

    /// The three-valued result on header and property dicts (as `Selector.evaluate`).
    fn evaluate(&self, headers: &Bound<'_, PyDict>, properties: &Bound<'_, PyDict>) -> PyResult2<Option<bool>> {
        let fields = DictFields::read(&self.selector, headers, properties)?;
        Ok(self.selector.evaluate(&fields)?)
    }

    /// Whether the selector is TRUE on header and property dicts (as `Selector.matches`).
    fn matches(&self, headers: &Bound<'_, PyDict>, properties: &Bound<'_, PyDict>) -> PyResult2<bool> {
        Ok(self.evaluate(headers, properties)? == Some(true))
    }

    /// Whether the selector is TRUE on an encoded message delivered
    /// `redelivery_count` times before. Evaluated holding the GIL: the work
    /// is far shorter than releasing and taking it back.
    fn matches_message(&self, encoded: &[u8], redelivery_count: u32) -> PyResult2<bool> {
        Ok(self.selector.matches_encoded(encoded, redelivery_count)?)
    }

    /// The header and property names the selector reads.
    #[getter]
    fn identifiers(&self) -> Vec<String> {
        self.selector.identifiers().iter().map(|id| id.name().to_string()).collect()
    }

    /// Whether the pager's resident header is enough to evaluate it.
    #[getter]
    fn needs_only_pager_header(&self) -> bool {
        self.selector.needs_only_pager_header()
    }

    /// The depth of the compiled tree.
    #[getter]
    fn depth(&self) -> usize {
        self.selector.depth()
    }

    fn __repr__(&self) -> String {
        format!("NativeSelector(identifiers={:?}, depth={})", self.identifiers(), self.selector.depth())
    }
}
