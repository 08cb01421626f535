//! Compiled JMS message selectors (JMS 2.0 §3.8.1) and their evaluation.
//!
//! The text is parsed in Python (`jmsstore.selector`, which stays the
//! reference for the semantics); the parser hands over a compiled tree,
//! which the binding turns into an [`Expr`] and [`Selector::new`] checks.
//! Identifiers are resolved then: a header field ([`HeaderField`]) or a
//! property name. Evaluation reads a [`MessageFields`] source: an encoded
//! message with the redelivery count the pager keeps ([`DeliveredMessage`]),
//! or the pager's resident header alone ([`PagerHeader`]) when
//! [`Selector::needs_only_pager_header`] says that is enough, so that a
//! paged-out body need not be read.
//!
//! # Semantics (those of `jmsstore.selector`)
//!
//! - SQL three-valued logic: a value is NULL (a missing property or header,
//!   an operation on NULL) or UNKNOWN, and a message is selected only when
//!   the selector is TRUE. `AND` is FALSE if any operand is FALSE, `OR` TRUE
//!   if any is TRUE, `NOT` UNKNOWN of UNKNOWN; a non-boolean operand is
//!   UNKNOWN.
//! - Numbers are longs (`byte`, `short`, `int` and `long` properties) or
//!   doubles (`float` and `double`). Comparisons between them are exact, as
//!   Python compares an `int` with a `float` (not by converting the long to
//!   a double); NaN compares unequal to everything, itself included.
//! - Strings and booleans compare only with their own type and only by `=`
//!   and `<>`; any other comparison, or one across types, is UNKNOWN. A
//!   `char` property is a one-character string.
//! - Arithmetic on a non-number is NULL, as is division by zero (`0`, `0.0`
//!   or `-0.0`). Long division truncates toward zero. A long `+`, `-`, `*`,
//!   `/` or unary `-` whose exact result does not fit a long gives the
//!   double nearest to that exact result (never a wrapped-around long):
//!   Python's integers do not overflow, and `jmsstore.selector` converts
//!   such a result to `float` the same way, so both agree on every input.
//! - `LIKE` matches the whole string: `%` any run of characters, `_` one
//!   character (newlines included), the escape character makes the next
//!   `%`, `_` or itself literal. `LIKE`, `IN` on a non-string are UNKNOWN;
//!   `IS NULL` is never UNKNOWN.
//! - `x BETWEEN a AND b` is `a <= x AND x <= b`; the `NOT` forms negate.
//!
//! # Depth
//!
//! A tree may be at most [`MAX_DEPTH`] nodes deep (the Python parser
//! refuses deeper nesting first). [`Selector::new`] measures the depth
//! without recursion and evaluation recurses at most that deep; an
//! [`Expr`] is dropped without recursion too, however it was built.

use std::cmp::Ordering;

use crate::broker::format::{MessageView, PagerFields, Value};
use crate::error::{Error, Result};

/// The deepest tree [`Selector::new`] accepts, counting the root and the
/// leaves: the nesting limit of `jmsstore.selector`, which counts each pair
/// of parentheses as a level too, so every selector it accepts fits.
pub const MAX_DEPTH: usize = 256;

/// A header field a selector can name (JMS 2.0 §3.8.1.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HeaderField {
    /// `JMSDeliveryMode`: the string `"PERSISTENT"` or `"NON_PERSISTENT"`.
    DeliveryMode,
    /// `JMSPriority`.
    Priority,
    /// `JMSMessageID`.
    MessageId,
    /// `JMSTimestamp`.
    Timestamp,
    /// `JMSCorrelationID`.
    CorrelationId,
    /// `JMSType`.
    Type,
    /// `JMSRedelivered`: true when the message was delivered before.
    Redelivered,
    /// `JMSDeliveryTime`.
    DeliveryTime,
    /// `JMSExpiration`.
    Expiration,
}

impl HeaderField {
    /// Every header field.
    pub const ALL: [HeaderField; 9] = [
        HeaderField::DeliveryMode,
        HeaderField::Priority,
        HeaderField::MessageId,
        HeaderField::Timestamp,
        HeaderField::CorrelationId,
        HeaderField::Type,
        HeaderField::Redelivered,
        HeaderField::DeliveryTime,
        HeaderField::Expiration,
    ];

    /// The field a selector identifier names, None for a property name.
    pub fn from_name(name: &str) -> Option<HeaderField> {
        HeaderField::ALL.into_iter().find(|field| field.name() == name)
    }

    /// The identifier selectors write (`JMSPriority`, ...).
    pub fn name(self) -> &'static str {
        match self {
            HeaderField::DeliveryMode => "JMSDeliveryMode",
            HeaderField::Priority => "JMSPriority",
            HeaderField::MessageId => "JMSMessageID",
            HeaderField::Timestamp => "JMSTimestamp",
            HeaderField::CorrelationId => "JMSCorrelationID",
            HeaderField::Type => "JMSType",
            HeaderField::Redelivered => "JMSRedelivered",
            HeaderField::DeliveryTime => "JMSDeliveryTime",
            HeaderField::Expiration => "JMSExpiration",
        }
    }

    /// Whether the pager's resident header holds the field (all but the
    /// delivery mode and the message id).
    pub fn in_pager_header(self) -> bool {
        !matches!(self, HeaderField::DeliveryMode | HeaderField::MessageId)
    }
}

/// What an identifier in a selector refers to, resolved when it is compiled.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Identifier {
    /// A header field.
    Header(HeaderField),
    /// A message property, by name.
    Property(Box<str>),
}

impl Identifier {
    /// A header field if `name` is one of the header identifiers, else a property.
    pub fn resolve(name: &str) -> Identifier {
        match HeaderField::from_name(name) {
            Some(field) => Identifier::Header(field),
            None => Identifier::Property(name.into()),
        }
    }

    /// The name as the selector writes it.
    pub fn name(&self) -> &str {
        match self {
            Identifier::Header(field) => field.name(),
            Identifier::Property(name) => name,
        }
    }
}

/// A literal value.
#[derive(Clone, Debug, PartialEq)]
pub enum Literal {
    /// `TRUE` or `FALSE`.
    Bool(bool),
    /// An exact numeric literal.
    Long(i64),
    /// An approximate numeric literal.
    Double(f64),
    /// A string literal.
    String(Box<str>),
}

/// A comparison operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CompareOp {
    /// `=`
    Eq,
    /// `<>`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

impl CompareOp {
    /// The operator a selector writes as `symbol`.
    pub fn from_symbol(symbol: &str) -> Option<CompareOp> {
        Some(match symbol {
            "=" => CompareOp::Eq,
            "<>" => CompareOp::Ne,
            "<" => CompareOp::Lt,
            "<=" => CompareOp::Le,
            ">" => CompareOp::Gt,
            ">=" => CompareOp::Ge,
            _ => return None,
        })
    }
}

/// A binary arithmetic operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArithmeticOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
}

impl ArithmeticOp {
    /// The operator a selector writes as `symbol`.
    pub fn from_symbol(symbol: &str) -> Option<ArithmeticOp> {
        Some(match symbol {
            "+" => ArithmeticOp::Add,
            "-" => ArithmeticOp::Sub,
            "*" => ArithmeticOp::Mul,
            "/" => ArithmeticOp::Div,
            _ => return None,
        })
    }
}

/// A compiled `LIKE` pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LikePattern {
    tokens: Vec<LikeToken>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LikeToken {
    /// `%`: any run of characters, the empty one included.
    AnyRun,
    /// `_`: exactly one character.
    AnyOne,
    /// A character that matches only itself.
    Char(char),
}

impl LikePattern {
    /// Compiles `pattern`; with an `escape` character, the escape followed
    /// by `%`, `_` or itself is that character taken literally, and an
    /// escape followed by anything else (or by nothing) is an error.
    pub fn new(pattern: &str, escape: Option<char>) -> Result<LikePattern> {
        let mut tokens = Vec::with_capacity(pattern.len());
        let mut chars = pattern.chars();
        while let Some(c) = chars.next() {
            let token = if Some(c) == escape {
                match chars.next() {
                    Some(next) if next == '%' || next == '_' || Some(next) == escape => LikeToken::Char(next),
                    _ => {
                        return Err(Error::invalid(format!(
                            "in LIKE pattern {pattern:?} the escape character must precede %, _ or itself"
                        )))
                    }
                }
            } else {
                match c {
                    '%' => LikeToken::AnyRun,
                    '_' => LikeToken::AnyOne,
                    other => LikeToken::Char(other),
                }
            };
            // Runs of % match what one does: keep one, so matching never backtracks over them twice.
            if !(token == LikeToken::AnyRun && tokens.last() == Some(&LikeToken::AnyRun)) {
                tokens.push(token);
            }
        }
        Ok(LikePattern { tokens })
    }

    /// Whether the whole of `text` matches.
    pub fn matches(&self, text: &str) -> bool {
        self.matches_text(Text::Str(text))
    }

    /// Greedy matching that, on a mismatch, lets the latest `%` take one
    /// more character: linear in most cases, at worst pattern length times
    /// text length, never exponential.
    fn matches_text(&self, text: Text<'_>) -> bool {
        let tokens = &self.tokens;
        let (mut p, mut t) = (0, 0);
        // The token after the latest %, and the text position it resumes from.
        let mut resume: Option<(usize, usize)> = None;
        loop {
            let Some((c, after)) = text.code_point_at(t) else {
                return tokens.get(p..).is_some_and(|rest| rest.iter().all(|tok| *tok == LikeToken::AnyRun));
            };
            match tokens.get(p) {
                Some(LikeToken::AnyOne) => {
                    p += 1;
                    t = after;
                    continue;
                }
                Some(LikeToken::Char(x)) if u32::from(*x) == c => {
                    p += 1;
                    t = after;
                    continue;
                }
                Some(LikeToken::AnyRun) => {
                    p += 1;
                    resume = Some((p, t));
                    continue;
                }
                _ => {}
            }
            let Some((resume_p, resume_t)) = resume else { return false };
            let Some((_, next_t)) = text.code_point_at(resume_t) else { return false };
            resume = Some((resume_p, next_t));
            p = resume_p;
            t = next_t;
        }
    }
}

/// The string literals of an `IN` list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InList {
    /// Sorted and without duplicates, for a binary search.
    sorted: Vec<Box<str>>,
}

impl InList {
    /// The list of `values` (order and repeats do not matter).
    pub fn new<S: Into<Box<str>>>(values: impl IntoIterator<Item = S>) -> InList {
        let mut sorted: Vec<Box<str>> = values.into_iter().map(Into::into).collect();
        sorted.sort_unstable();
        sorted.dedup();
        InList { sorted }
    }

    /// Whether `value` is one of the list's strings.
    pub fn contains(&self, value: &str) -> bool {
        self.sorted.binary_search_by(|item| (**item).cmp(value)).is_ok()
    }

    /// The strings, sorted.
    pub fn values(&self) -> impl Iterator<Item = &str> {
        self.sorted.iter().map(|s| &**s)
    }

    fn contains_text(&self, text: Text<'_>) -> bool {
        match text {
            Text::Str(s) => self.contains(s),
            Text::Unit(unit) => {
                // A lone surrogate is no string literal (those are UTF-8).
                char::from_u32(u32::from(unit)).is_some_and(|c| self.contains(c.encode_utf8(&mut [0; 4])))
            }
        }
    }
}

/// A compiled selector expression. Build it bottom-up (the binding does,
/// from the tree `jmsstore.selector` hands over) and check it with
/// [`Selector::new`]. Dropping one never recurses; the derived `Clone`,
/// `PartialEq` and `Debug` do, so use them on trees no deeper than
/// [`MAX_DEPTH`] (every tree a [`Selector`] holds).
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// A literal.
    Literal(Literal),
    /// A header field or property.
    Identifier(Identifier),
    /// `NOT e`.
    Not(Box<Expr>),
    /// `e1 AND e2 AND ...` (at least one operand).
    And(Vec<Expr>),
    /// `e1 OR e2 OR ...` (at least one operand).
    Or(Vec<Expr>),
    /// `a op b`.
    Compare(CompareOp, Box<Expr>, Box<Expr>),
    /// `first op1 e1 op2 e2 ...`, applied left to right: a chain of
    /// operators of one precedence level is one node, not a deep tree.
    Arithmetic(Box<Expr>, Vec<(ArithmeticOp, Expr)>),
    /// Unary `-e`.
    Negate(Box<Expr>),
    /// Unary `+e`: `e` if it is a number, else NULL.
    Plus(Box<Expr>),
    /// `operand [NOT] BETWEEN low AND high`.
    Between {
        /// The value tested.
        operand: Box<Expr>,
        /// The lower bound (inclusive).
        low: Box<Expr>,
        /// The upper bound (inclusive).
        high: Box<Expr>,
        /// `NOT BETWEEN`.
        negated: bool,
    },
    /// `operand [NOT] IN ('a', 'b', ...)`.
    In {
        /// The value tested.
        operand: Box<Expr>,
        /// The strings.
        list: InList,
        /// `NOT IN`.
        negated: bool,
    },
    /// `operand [NOT] LIKE pattern [ESCAPE c]`.
    Like {
        /// The value tested.
        operand: Box<Expr>,
        /// The compiled pattern.
        pattern: LikePattern,
        /// `NOT LIKE`.
        negated: bool,
    },
    /// `operand IS [NOT] NULL`.
    IsNull {
        /// The value tested.
        operand: Box<Expr>,
        /// `IS NOT NULL`.
        negated: bool,
    },
}

impl Expr {
    /// The identifier `name`, resolved to a header field or a property.
    pub fn identifier(name: &str) -> Expr {
        Expr::Identifier(Identifier::resolve(name))
    }

    /// Calls `f` on each direct operand.
    fn for_each_operand<'a>(&'a self, mut f: impl FnMut(&'a Expr)) {
        match self {
            Expr::Literal(_) | Expr::Identifier(_) => {}
            Expr::Not(e) | Expr::Negate(e) | Expr::Plus(e) => f(e),
            Expr::In { operand, .. } | Expr::Like { operand, .. } | Expr::IsNull { operand, .. } => f(operand),
            Expr::And(operands) | Expr::Or(operands) => operands.iter().for_each(f),
            Expr::Compare(_, a, b) => {
                f(a);
                f(b);
            }
            Expr::Arithmetic(first, rest) => {
                f(first);
                rest.iter().for_each(|(_, e)| f(e));
            }
            Expr::Between { operand, low, high, .. } => {
                f(operand);
                f(low);
                f(high);
            }
        }
    }

    /// Moves the direct operands into `out`, leaving placeholders.
    fn take_operands(&mut self, out: &mut Vec<Expr>) {
        fn take(e: &mut Expr) -> Expr {
            std::mem::replace(e, Expr::Literal(Literal::Bool(false)))
        }
        match self {
            Expr::Literal(_) | Expr::Identifier(_) => {}
            Expr::Not(e) | Expr::Negate(e) | Expr::Plus(e) => out.push(take(e)),
            Expr::In { operand, .. } | Expr::Like { operand, .. } | Expr::IsNull { operand, .. } => {
                out.push(take(operand))
            }
            Expr::And(operands) | Expr::Or(operands) => out.append(operands),
            Expr::Compare(_, a, b) => out.extend([take(a), take(b)]),
            Expr::Arithmetic(first, rest) => {
                out.push(take(first));
                out.extend(rest.drain(..).map(|(_, e)| e));
            }
            Expr::Between { operand, low, high, .. } => out.extend([take(operand), take(low), take(high)]),
        }
    }
}

impl Drop for Expr {
    /// Drops the operands from a heap stack: the compiler's recursive drop
    /// would overflow the thread's stack on a tree built deep enough.
    fn drop(&mut self) {
        let mut pending = Vec::new();
        self.take_operands(&mut pending);
        while let Some(mut e) = pending.pop() {
            e.take_operands(&mut pending);
        }
    }
}

/// Where a selector reads a message's header fields and properties.
///
/// Both return values borrowed from the source. A source that cannot
/// answer (a malformed encoded property, a field the pager's header does
/// not keep) returns an error, which evaluation passes on.
pub trait MessageFields {
    /// The value of a header field as selectors see it (NULL when absent).
    fn header(&self, field: HeaderField) -> Result<Value<'_>>;

    /// The value of property `name`, None when the message has none.
    fn property(&self, name: &str) -> Result<Option<Value<'_>>>;
}

/// An encoded message as a consumer would receive it: its
/// `JMSRedelivered` comes from the redelivery count the pager keeps.
#[derive(Clone, Copy, Debug)]
pub struct DeliveredMessage<'a> {
    /// The encoded message.
    pub message: MessageView<'a>,
    /// Times it was delivered before.
    pub redelivery_count: u32,
}

impl MessageFields for DeliveredMessage<'_> {
    fn header(&self, field: HeaderField) -> Result<Value<'_>> {
        let header = self.message.header();
        Ok(match field {
            HeaderField::DeliveryMode => Value::String(header.delivery_mode.selector_name()),
            HeaderField::Priority => Value::Long(i64::from(header.priority)),
            HeaderField::MessageId => text(header.message_id),
            HeaderField::Timestamp => Value::Long(header.timestamp),
            HeaderField::CorrelationId => text(header.correlation_id),
            HeaderField::Type => text(header.message_type),
            HeaderField::Redelivered => Value::Bool(self.redelivery_count > 0),
            HeaderField::DeliveryTime => Value::Long(header.delivery_time),
            HeaderField::Expiration => Value::Long(header.expiration),
        })
    }

    fn property(&self, name: &str) -> Result<Option<Value<'_>>> {
        self.message.property(name)
    }
}

/// A string field's value: NULL when absent.
fn text(s: Option<&str>) -> Value<'_> {
    s.map_or(Value::Null, Value::String)
}

/// The header fields the pager keeps resident for every message, paged
/// out or not: enough for a selector whose
/// [`Selector::needs_only_pager_header`] is true.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PagerHeader<'a> {
    /// JMSPriority.
    pub priority: u8,
    /// JMSTimestamp.
    pub timestamp: i64,
    /// JMSExpiration.
    pub expiration: i64,
    /// JMSDeliveryTime.
    pub delivery_time: i64,
    /// JMSCorrelationID.
    pub correlation_id: Option<&'a str>,
    /// JMSType.
    pub message_type: Option<&'a str>,
    /// Times delivered before (JMSRedelivered is `redelivery_count > 0`).
    pub redelivery_count: u32,
}

impl<'a> PagerHeader<'a> {
    /// The pager's fields of a message (from [`crate::broker::format::peek`])
    /// with its redelivery count.
    pub fn new(fields: &PagerFields<'a>, redelivery_count: u32) -> PagerHeader<'a> {
        PagerHeader {
            priority: fields.priority,
            timestamp: fields.timestamp,
            expiration: fields.expiration,
            delivery_time: fields.delivery_time,
            correlation_id: fields.correlation_id,
            message_type: fields.message_type,
            redelivery_count,
        }
    }
}

impl MessageFields for PagerHeader<'_> {
    fn header(&self, field: HeaderField) -> Result<Value<'_>> {
        Ok(match field {
            HeaderField::Priority => Value::Long(i64::from(self.priority)),
            HeaderField::Timestamp => Value::Long(self.timestamp),
            HeaderField::CorrelationId => text(self.correlation_id),
            HeaderField::Type => text(self.message_type),
            HeaderField::Redelivered => Value::Bool(self.redelivery_count > 0),
            HeaderField::DeliveryTime => Value::Long(self.delivery_time),
            HeaderField::Expiration => Value::Long(self.expiration),
            HeaderField::DeliveryMode | HeaderField::MessageId => {
                return Err(Error::invalid(format!(
                    "the pager's header does not hold {}: evaluate this selector on the message",
                    field.name()
                )))
            }
        })
    }

    fn property(&self, name: &str) -> Result<Option<Value<'_>>> {
        Err(Error::invalid(format!(
            "the pager's header holds no properties ({name}): evaluate this selector on the message"
        )))
    }
}

/// A checked, compiled selector: evaluate it on any [`MessageFields`].
#[derive(Clone, Debug, PartialEq)]
pub struct Selector {
    expr: Expr,
    identifiers: Vec<Identifier>,
    depth: usize,
}

impl Selector {
    /// Checks `expr` (no deeper than [`MAX_DEPTH`], no `AND` or `OR`
    /// without operands) and keeps it. Never recurses.
    pub fn new(expr: Expr) -> Result<Selector> {
        let mut identifiers: Vec<Identifier> = Vec::new();
        let mut depth = 0;
        let mut pending: Vec<(&Expr, usize)> = vec![(&expr, 1)];
        while let Some((e, level)) = pending.pop() {
            if level > MAX_DEPTH {
                return Err(Error::invalid(format!("a selector tree may be at most {MAX_DEPTH} levels deep")));
            }
            depth = depth.max(level);
            match e {
                Expr::Identifier(id) if !identifiers.contains(id) => identifiers.push(id.clone()),
                Expr::And(operands) | Expr::Or(operands) if operands.is_empty() => {
                    return Err(Error::invalid("AND and OR need at least one operand"));
                }
                _ => {}
            }
            // Pushed in reverse, so identifiers are listed in the order the selector names them.
            let first_operand = pending.len();
            e.for_each_operand(|operand| pending.push((operand, level + 1)));
            pending[first_operand..].reverse();
        }
        Ok(Selector { expr, identifiers, depth })
    }

    /// The expression.
    pub fn expr(&self) -> &Expr {
        &self.expr
    }

    /// The header fields and properties the selector reads, each once.
    pub fn identifiers(&self) -> &[Identifier] {
        &self.identifiers
    }

    /// The depth of the tree (a lone literal is 1).
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// Whether the selector reads only header fields the pager keeps
    /// resident ([`HeaderField::in_pager_header`]): then a [`PagerHeader`]
    /// evaluates it and a paged-out body need not be read.
    pub fn needs_only_pager_header(&self) -> bool {
        self.identifiers.iter().all(|id| matches!(id, Identifier::Header(field) if field.in_pager_header()))
    }

    /// The three-valued result: `Some(true)`, `Some(false)`, or None for
    /// UNKNOWN. Fails only when `fields` cannot give a value it is asked for.
    pub fn evaluate<F: MessageFields + ?Sized>(&self, fields: &F) -> Result<Option<bool>> {
        Ok(eval(&self.expr, fields)?.truth())
    }

    /// Whether the selector is TRUE for the message (FALSE and UNKNOWN reject it).
    pub fn matches<F: MessageFields + ?Sized>(&self, fields: &F) -> Result<bool> {
        Ok(self.evaluate(fields)? == Some(true))
    }

    /// [`Selector::matches`] on an encoded message delivered
    /// `redelivery_count` times before. Fails if the message's header is
    /// malformed, or a property the selector reads is.
    pub fn matches_encoded(&self, encoded: &[u8], redelivery_count: u32) -> Result<bool> {
        let message = MessageView::parse(encoded)?;
        self.matches(&DeliveredMessage { message, redelivery_count })
    }
}

/// A value during evaluation.
#[derive(Clone, Copy, Debug)]
enum Operand<'a> {
    Null,
    Bool(bool),
    Long(i64),
    Double(f64),
    Text(Text<'a>),
    /// A value no operator applies to (a `byte[]` property), but not NULL.
    Other,
}

/// A string: UTF-8 text, or a `char` property's UTF-16 unit, which may be
/// a lone surrogate (Python reads it as a one-character string).
#[derive(Clone, Copy, Debug)]
enum Text<'a> {
    Str(&'a str),
    Unit(u16),
}

impl Text<'_> {
    /// The code point at `pos` (a byte offset, or 0 for a unit) and the
    /// position after it; None at the end.
    fn code_point_at(self, pos: usize) -> Option<(u32, usize)> {
        match self {
            Text::Str(s) => s.get(pos..)?.chars().next().map(|c| (u32::from(c), pos + c.len_utf8())),
            Text::Unit(unit) => (pos == 0).then_some((u32::from(unit), 1)),
        }
    }

    fn equals(self, other: Text<'_>) -> bool {
        match (self, other) {
            (Text::Str(a), Text::Str(b)) => a == b,
            (Text::Unit(a), Text::Unit(b)) => a == b,
            (Text::Str(s), Text::Unit(unit)) | (Text::Unit(unit), Text::Str(s)) => {
                let mut chars = s.chars();
                matches!((chars.next(), chars.next()), (Some(c), None) if u32::from(c) == u32::from(unit))
            }
        }
    }
}

impl<'a> Operand<'a> {
    fn of(value: Value<'a>) -> Operand<'a> {
        match value {
            Value::Null => Operand::Null,
            Value::Bool(v) => Operand::Bool(v),
            Value::Byte(v) => Operand::Long(i64::from(v)),
            Value::Short(v) => Operand::Long(i64::from(v)),
            Value::Int(v) => Operand::Long(i64::from(v)),
            Value::Long(v) => Operand::Long(v),
            Value::Float(v) => Operand::Double(f64::from(v)),
            Value::Double(v) => Operand::Double(v),
            Value::String(v) => Operand::Text(Text::Str(v)),
            Value::Char(v) => Operand::Text(Text::Unit(v)),
            Value::Bytes(_) => Operand::Other,
        }
    }

    fn logical(truth: Option<bool>) -> Operand<'a> {
        truth.map_or(Operand::Null, Operand::Bool)
    }

    /// As a truth value: booleans are themselves, anything else is UNKNOWN.
    fn truth(self) -> Option<bool> {
        match self {
            Operand::Bool(v) => Some(v),
            _ => None,
        }
    }
}

fn eval<'a, F: MessageFields + ?Sized>(expr: &'a Expr, fields: &'a F) -> Result<Operand<'a>> {
    Ok(match expr {
        Expr::Literal(Literal::Bool(v)) => Operand::Bool(*v),
        Expr::Literal(Literal::Long(v)) => Operand::Long(*v),
        Expr::Literal(Literal::Double(v)) => Operand::Double(*v),
        Expr::Literal(Literal::String(v)) => Operand::Text(Text::Str(v)),
        Expr::Identifier(Identifier::Header(field)) => Operand::of(fields.header(*field)?),
        Expr::Identifier(Identifier::Property(name)) => fields.property(name)?.map_or(Operand::Null, Operand::of),
        Expr::Not(e) => Operand::logical(eval(e, fields)?.truth().map(|v| !v)),
        Expr::And(operands) => {
            let mut all = Some(true);
            for e in operands {
                match eval(e, fields)?.truth() {
                    Some(false) => return Ok(Operand::Bool(false)),
                    Some(true) => {}
                    None => all = None,
                }
            }
            Operand::logical(all)
        }
        Expr::Or(operands) => {
            let mut any = Some(false);
            for e in operands {
                match eval(e, fields)?.truth() {
                    Some(true) => return Ok(Operand::Bool(true)),
                    Some(false) => {}
                    None => any = None,
                }
            }
            Operand::logical(any)
        }
        Expr::Compare(op, a, b) => Operand::logical(compare(*op, eval(a, fields)?, eval(b, fields)?)),
        Expr::Arithmetic(first, rest) => {
            let mut acc = eval(first, fields)?;
            for (op, e) in rest {
                acc = arithmetic(*op, acc, eval(e, fields)?);
            }
            acc
        }
        Expr::Negate(e) => match eval(e, fields)? {
            // -i64::MIN is 2^63, exactly a double.
            Operand::Long(v) => v.checked_neg().map_or(Operand::Double(-(v as f64)), Operand::Long),
            Operand::Double(v) => Operand::Double(-v),
            _ => Operand::Null,
        },
        Expr::Plus(e) => match eval(e, fields)? {
            number @ (Operand::Long(_) | Operand::Double(_)) => number,
            _ => Operand::Null,
        },
        Expr::Between { operand, low, high, negated } => {
            let value = eval(operand, fields)?;
            let above = compare(CompareOp::Le, eval(low, fields)?, value);
            let below = compare(CompareOp::Le, value, eval(high, fields)?);
            let inside = match (above, below) {
                (Some(false), _) | (_, Some(false)) => Some(false),
                (Some(true), Some(true)) => Some(true),
                _ => None,
            };
            Operand::logical(if *negated { inside.map(|v| !v) } else { inside })
        }
        Expr::In { operand, list, negated } => match eval(operand, fields)? {
            Operand::Text(text) => Operand::Bool(list.contains_text(text) != *negated),
            _ => Operand::Null,
        },
        Expr::Like { operand, pattern, negated } => match eval(operand, fields)? {
            Operand::Text(text) => Operand::Bool(pattern.matches_text(text) != *negated),
            _ => Operand::Null,
        },
        Expr::IsNull { operand, negated } => Operand::Bool(matches!(eval(operand, fields)?, Operand::Null) != *negated),
    })
}

/// `a op b`: None (UNKNOWN) for NULL, mixed types, and strings or booleans
/// compared by anything but `=` and `<>`.
fn compare(op: CompareOp, a: Operand<'_>, b: Operand<'_>) -> Option<bool> {
    let equality = |equal: bool| match op {
        CompareOp::Eq => Some(equal),
        CompareOp::Ne => Some(!equal),
        _ => None,
    };
    // None: unordered (a NaN is involved).
    let ordering = match (a, b) {
        (Operand::Long(x), Operand::Long(y)) => Some(x.cmp(&y)),
        (Operand::Double(x), Operand::Double(y)) => x.partial_cmp(&y),
        (Operand::Long(x), Operand::Double(y)) => compare_long_double(x, y),
        (Operand::Double(x), Operand::Long(y)) => compare_long_double(y, x).map(Ordering::reverse),
        (Operand::Text(x), Operand::Text(y)) => return equality(x.equals(y)),
        (Operand::Bool(x), Operand::Bool(y)) => return equality(x == y),
        _ => return None,
    };
    Some(match op {
        CompareOp::Eq => ordering == Some(Ordering::Equal),
        CompareOp::Ne => ordering != Some(Ordering::Equal),
        CompareOp::Lt => ordering == Some(Ordering::Less),
        CompareOp::Le => matches!(ordering, Some(Ordering::Less | Ordering::Equal)),
        CompareOp::Gt => ordering == Some(Ordering::Greater),
        CompareOp::Ge => matches!(ordering, Some(Ordering::Greater | Ordering::Equal)),
    })
}

/// 2^63 as a double: the first double above every long.
const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;

/// Compares a long with a double exactly, as Python compares an `int`
/// with a `float` (converting the long would round: 2^53 + 1 would equal
/// 2^53). None when the double is NaN.
fn compare_long_double(x: i64, y: f64) -> Option<Ordering> {
    if y.is_nan() {
        return None;
    }
    if y >= TWO_POW_63 {
        return Some(Ordering::Less);
    }
    if y < -TWO_POW_63 {
        return Some(Ordering::Greater);
    }
    // Here -2^63 <= y < 2^63: its integer part is a long, exactly.
    let whole = y.trunc();
    match x.cmp(&(whole as i64)) {
        Ordering::Equal => 0.0_f64.partial_cmp(&(y - whole)),
        unequal => Some(unequal),
    }
}

/// `a op b` on numbers; NULL for anything else and for division by zero.
fn arithmetic<'a>(op: ArithmeticOp, a: Operand<'a>, b: Operand<'a>) -> Operand<'a> {
    let (x, y) = match (a, b) {
        (Operand::Long(x), Operand::Long(y)) => return long_arithmetic(op, x, y),
        (Operand::Long(x), Operand::Double(y)) => (x as f64, y),
        (Operand::Double(x), Operand::Long(y)) => (x, y as f64),
        (Operand::Double(x), Operand::Double(y)) => (x, y),
        _ => return Operand::Null,
    };
    Operand::Double(match op {
        ArithmeticOp::Add => x + y,
        ArithmeticOp::Sub => x - y,
        ArithmeticOp::Mul => x * y,
        ArithmeticOp::Div if y == 0.0 => return Operand::Null,
        ArithmeticOp::Div => x / y,
    })
}

/// Long arithmetic, exact in 128 bits (a product of two longs fits); a
/// result outside the long range becomes the nearest double, as Python's
/// `float()` of the exact integer (both round half to even).
fn long_arithmetic<'a>(op: ArithmeticOp, x: i64, y: i64) -> Operand<'a> {
    let (x, y) = (i128::from(x), i128::from(y));
    let exact = match op {
        ArithmeticOp::Add => x + y,
        ArithmeticOp::Sub => x - y,
        ArithmeticOp::Mul => x * y,
        ArithmeticOp::Div if y == 0 => return Operand::Null,
        // Rust's integer division truncates toward zero, as Java's does.
        ArithmeticOp::Div => x / y,
    };
    i64::try_from(exact).map_or(Operand::Double(exact as f64), Operand::Long)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::format::{Body, DeliveryMode, MessageHeader, MessageWriter};
    use proptest::prelude::*;
    use std::collections::HashMap;

    // ------------------------------------------------------------ building expressions

    fn prop(name: &str) -> Expr {
        Expr::Identifier(Identifier::Property(name.into()))
    }
    fn header(field: HeaderField) -> Expr {
        Expr::Identifier(Identifier::Header(field))
    }
    fn long(v: i64) -> Expr {
        Expr::Literal(Literal::Long(v))
    }
    fn double(v: f64) -> Expr {
        Expr::Literal(Literal::Double(v))
    }
    fn string(v: &str) -> Expr {
        Expr::Literal(Literal::String(v.into()))
    }
    fn boolean(v: bool) -> Expr {
        Expr::Literal(Literal::Bool(v))
    }
    fn cmp(op: &str, a: Expr, b: Expr) -> Expr {
        Expr::Compare(CompareOp::from_symbol(op).unwrap(), Box::new(a), Box::new(b))
    }
    fn arith(a: Expr, op: &str, b: Expr) -> Expr {
        Expr::Arithmetic(Box::new(a), vec![(ArithmeticOp::from_symbol(op).unwrap(), b)])
    }
    fn not(e: Expr) -> Expr {
        Expr::Not(Box::new(e))
    }
    fn like(e: Expr, pattern: &str, escape: Option<char>) -> Expr {
        Expr::Like { operand: Box::new(e), pattern: LikePattern::new(pattern, escape).unwrap(), negated: false }
    }

    /// Header fields and properties from maps, as the binding's test entry point has them.
    #[derive(Default)]
    struct Fields {
        headers: HashMap<HeaderField, Value<'static>>,
        properties: HashMap<&'static str, Value<'static>>,
    }

    impl MessageFields for Fields {
        fn header(&self, field: HeaderField) -> Result<Value<'_>> {
            Ok(self.headers.get(&field).copied().unwrap_or(Value::Null))
        }
        fn property(&self, name: &str) -> Result<Option<Value<'_>>> {
            Ok(self.properties.get(name).copied())
        }
    }

    fn with(props: &[(&'static str, Value<'static>)]) -> Fields {
        Fields { headers: HashMap::new(), properties: props.iter().copied().collect() }
    }

    fn ev(expr: Expr, fields: &Fields) -> Option<bool> {
        Selector::new(expr).unwrap().evaluate(fields).unwrap()
    }

    fn ev0(expr: Expr) -> Option<bool> {
        ev(expr, &Fields::default())
    }

    const T: Option<bool> = Some(true);
    const F: Option<bool> = Some(false);
    const U: Option<bool> = None;

    // ------------------------------------------------------------ logic

    /// A condition with the given truth value: UNKNOWN is a comparison with a missing property.
    fn truth(v: Option<bool>) -> Expr {
        match v {
            Some(b) => boolean(b),
            None => cmp("=", prop("missing"), long(1)),
        }
    }

    #[test]
    fn and_or_not_follow_sql_truth_tables() {
        let values = [T, F, U];
        for a in values {
            for b in values {
                let and = match (a, b) {
                    (F, _) | (_, F) => F,
                    (T, T) => T,
                    _ => U,
                };
                let or = match (a, b) {
                    (T, _) | (_, T) => T,
                    (F, F) => F,
                    _ => U,
                };
                assert_eq!(ev0(Expr::And(vec![truth(a), truth(b)])), and, "{a:?} AND {b:?}");
                assert_eq!(ev0(Expr::Or(vec![truth(a), truth(b)])), or, "{a:?} OR {b:?}");
            }
            assert_eq!(ev0(not(truth(a))), a.map(|v| !v));
        }
        // n-ary chains: FALSE anywhere wins for AND, TRUE anywhere for OR.
        assert_eq!(ev0(Expr::And(vec![truth(U), truth(T), truth(F)])), F);
        assert_eq!(ev0(Expr::Or(vec![truth(U), truth(F), truth(T)])), T);
        assert_eq!(ev0(Expr::And(vec![truth(T)])), T);
    }

    #[test]
    fn non_boolean_conditions_are_unknown() {
        let fields = with(&[("x", Value::Long(1)), ("s", Value::String("TRUE"))]);
        assert_eq!(ev(prop("x"), &fields), U);
        assert_eq!(ev(not(prop("s")), &fields), U);
        assert_eq!(ev(Expr::And(vec![prop("x"), boolean(true)]), &fields), U);
        assert_eq!(ev(Expr::Or(vec![prop("x"), boolean(false)]), &fields), U);
        assert_eq!(ev(long(3), &fields), U);
    }

    // ------------------------------------------------------------ comparisons

    #[test]
    fn every_comparison_operator_on_numbers() {
        let cases = [
            ("=", [F, T, F]),
            ("<>", [T, F, T]),
            ("<", [T, F, F]),
            ("<=", [T, T, F]),
            (">", [F, F, T]),
            (">=", [F, T, T]),
        ];
        for (op, expected) in cases {
            for (i, v) in [1, 2, 3].into_iter().enumerate() {
                assert_eq!(ev0(cmp(op, long(v), long(2))), expected[i], "{v} {op} 2");
                assert_eq!(ev0(cmp(op, double(v as f64), long(2))), expected[i], "{v}.0 {op} 2");
                assert_eq!(ev0(cmp(op, long(v), double(2.0))), expected[i], "{v} {op} 2.0");
                assert_eq!(ev0(cmp(op, double(v as f64), double(2.0))), expected[i]);
            }
        }
    }

    #[test]
    fn long_and_double_compare_exactly() {
        let big = 1i64 << 53;
        // 2^53 + 1 is no double: converting it would make it equal 2^53.
        assert_eq!(ev0(cmp("=", long(big + 1), double(big as f64))), F);
        assert_eq!(ev0(cmp(">", long(big + 1), double(big as f64))), T);
        assert_eq!(ev0(cmp("<", double(big as f64), long(big + 1))), T);
        assert_eq!(ev0(cmp("<", long(i64::MAX), double(TWO_POW_63))), T);
        assert_eq!(ev0(cmp("=", long(i64::MIN), double(-TWO_POW_63))), T);
        assert_eq!(ev0(cmp(">", long(i64::MIN), double(-TWO_POW_63 * 2.0))), T);
        assert_eq!(ev0(cmp("<", long(2), double(2.5))), T);
        assert_eq!(ev0(cmp(">", long(-2), double(-2.5))), T);
        assert_eq!(ev0(cmp("<", long(-3), double(-2.5))), T);
        assert_eq!(ev0(cmp("=", long(0), double(-0.0))), T);
        assert_eq!(ev0(cmp("=", double(0.0), double(-0.0))), T);
        assert_eq!(ev0(cmp("<", long(i64::MAX), double(f64::INFINITY))), T);
        assert_eq!(ev0(cmp(">", long(i64::MIN), double(f64::NEG_INFINITY))), T);
    }

    #[test]
    fn nan_is_unequal_to_everything() {
        let fields = with(&[("nan", Value::Double(f64::NAN)), ("fnan", Value::Float(f32::NAN))]);
        for other in [long(1), double(f64::NAN), prop("nan"), prop("fnan"), double(f64::INFINITY)] {
            for op in ["=", "<", "<=", ">", ">="] {
                assert_eq!(ev(cmp(op, prop("nan"), other.clone()), &fields), F, "NaN {op} {other:?}");
                assert_eq!(ev(cmp(op, other.clone(), prop("nan")), &fields), F);
            }
            assert_eq!(ev(cmp("<>", prop("nan"), other.clone()), &fields), T);
        }
    }

    #[test]
    fn strings_and_booleans_compare_by_equality_only() {
        let fields = with(&[("s", Value::String("a")), ("t", Value::String("b")), ("b", Value::Bool(true))]);
        assert_eq!(ev(cmp("=", prop("s"), string("a")), &fields), T);
        assert_eq!(ev(cmp("<>", prop("s"), prop("t")), &fields), T);
        assert_eq!(ev(cmp("=", prop("b"), boolean(true)), &fields), T);
        assert_eq!(ev(cmp("<>", prop("b"), boolean(true)), &fields), F);
        for op in ["<", "<=", ">", ">="] {
            assert_eq!(ev(cmp(op, prop("s"), prop("t")), &fields), U);
            assert_eq!(ev(cmp(op, prop("b"), boolean(false)), &fields), U);
        }
        // Comparisons of comparisons are booleans.
        assert_eq!(ev(cmp("=", cmp("=", long(1), long(1)), boolean(true)), &fields), T);
    }

    #[test]
    fn properties_of_the_wrong_type_are_unknown_at_evaluation() {
        let fields = with(&[
            ("str1", Value::String("1")),
            ("one", Value::Long(1)),
            ("yes", Value::Bool(true)),
            ("no", Value::Bool(false)),
            ("raw", Value::Bytes(b"a")),
            ("raw2", Value::Bytes(b"a")),
        ]);
        for (a, b) in [
            (prop("str1"), long(1)),
            (prop("one"), string("1")),
            (prop("one"), boolean(true)),
            (prop("yes"), long(1)),
            (prop("no"), long(0)),
            (prop("raw"), string("a")),
            (prop("raw"), prop("raw2")),
            (prop("str1"), prop("one")),
        ] {
            assert_eq!(ev(cmp("=", a.clone(), b.clone()), &fields), U, "{a:?} = {b:?}");
            assert_eq!(ev(not(cmp("=", a, b)), &fields), U);
        }
        assert_eq!(ev(cmp("<", prop("str1"), long(0)), &fields), U);
        assert_eq!(ev(arith(prop("yes"), "+", long(1)), &fields), U);
        assert_eq!(ev(cmp("=", arith(prop("str1"), "*", long(1)), long(1)), &fields), U);
        assert_eq!(ev(like(prop("one"), "1", None), &fields), U);
        assert_eq!(ev(like(prop("raw"), "a", None), &fields), U);
        let in_list = Expr::In { operand: Box::new(prop("one")), list: InList::new(["1"]), negated: false };
        assert_eq!(ev(in_list, &fields), U);
    }

    #[test]
    fn comparisons_with_null_are_unknown() {
        for op in ["=", "<>", "<", "<=", ">", ">="] {
            assert_eq!(ev0(cmp(op, prop("x"), long(1))), U);
            assert_eq!(ev0(cmp(op, long(1), prop("x"))), U);
            assert_eq!(ev0(cmp(op, prop("x"), prop("y"))), U);
        }
    }

    // ------------------------------------------------------------ arithmetic

    fn value_of(expr: Expr, fields: &Fields) -> String {
        // The arithmetic result, observed through comparisons with itself and a probe.
        let selector = Selector::new(Expr::IsNull { operand: Box::new(expr.clone()), negated: false }).unwrap();
        if selector.matches(fields).unwrap() {
            return "NULL".into();
        }
        let e = Selector::new(expr).unwrap();
        format!("{:?}", eval(&e.expr, fields).unwrap())
    }

    #[test]
    fn arithmetic_on_longs_and_doubles() {
        let f = Fields::default();
        assert_eq!(value_of(arith(long(3), "+", long(2)), &f), "Long(5)");
        assert_eq!(value_of(arith(long(3), "-", long(5)), &f), "Long(-2)");
        assert_eq!(value_of(arith(long(3), "*", long(-2)), &f), "Long(-6)");
        assert_eq!(value_of(arith(long(3), "+", double(0.5)), &f), "Double(3.5)");
        assert_eq!(value_of(arith(double(7.0), "/", long(2)), &f), "Double(3.5)");
        assert_eq!(value_of(arith(long(7), "/", double(2.0)), &f), "Double(3.5)");
        // A chain applies left to right.
        let chain = Expr::Arithmetic(
            Box::new(long(10)),
            vec![(ArithmeticOp::Sub, long(4)), (ArithmeticOp::Sub, long(3)), (ArithmeticOp::Mul, long(2))],
        );
        assert_eq!(value_of(chain, &f), "Long(6)");
        assert_eq!(ev0(cmp("=", Expr::Negate(Box::new(long(3))), long(-3))), T);
        assert_eq!(ev0(cmp("=", Expr::Plus(Box::new(double(2.5))), double(2.5))), T);
        assert_eq!(value_of(Expr::Plus(Box::new(string("a"))), &f), "NULL");
        assert_eq!(value_of(Expr::Negate(Box::new(boolean(true))), &f), "NULL");
        assert_eq!(value_of(Expr::Negate(Box::new(prop("x"))), &f), "NULL");
    }

    #[test]
    fn long_division_truncates_toward_zero() {
        for (a, b, q) in
            [(7, 2, 3), (-7, 2, -3), (7, -2, -3), (-7, -2, 3), (0, 5, 0), (-1, 2, 0), (i64::MIN, 1, i64::MIN)]
        {
            assert_eq!(ev0(cmp("=", arith(long(a), "/", long(b)), long(q))), T, "{a} / {b}");
        }
    }

    #[test]
    fn division_by_zero_is_null() {
        let f = Fields::default();
        for zero in [long(0), double(0.0), double(-0.0)] {
            for numerator in [long(1), long(0), double(1.5), double(f64::NAN), double(f64::INFINITY)] {
                assert_eq!(value_of(arith(numerator, "/", zero.clone()), &f), "NULL");
            }
        }
        // Dividing by NaN or by a tiny number is no division by zero.
        assert_eq!(value_of(arith(long(1), "/", double(1e-320)), &f), "Double(inf)");
        assert!(value_of(arith(long(1), "/", double(f64::NAN)), &f).contains("NaN"));
    }

    #[test]
    fn long_overflow_becomes_the_nearest_double() {
        let f = Fields::default();
        let max = i64::MAX;
        // As Python: the exact integer 2^63, then float() of it.
        assert_eq!(value_of(arith(long(max), "+", long(1)), &f), "Double(9.223372036854776e18)");
        assert_eq!(ev0(cmp(">", arith(long(max), "+", long(1)), long(max))), T);
        assert_eq!(value_of(arith(long(i64::MIN), "-", long(1)), &f), "Double(-9.223372036854776e18)");
        assert_eq!(value_of(arith(long(max), "*", long(max)), &f), "Double(8.507059173023462e37)");
        assert_eq!(value_of(arith(long(i64::MIN), "*", long(i64::MIN)), &f), "Double(8.507059173023462e37)");
        assert_eq!(value_of(arith(long(i64::MIN), "/", long(-1)), &f), "Double(9.223372036854776e18)");
        assert_eq!(value_of(Expr::Negate(Box::new(long(i64::MIN))), &f), "Double(9.223372036854776e18)");
        assert_eq!(value_of(Expr::Negate(Box::new(long(-max))), &f), format!("Long({max})"));
        // In range, nothing is rounded.
        assert_eq!(value_of(arith(long(max - 1), "+", long(1)), &f), format!("Long({max})"));
        assert_eq!(value_of(arith(long(i64::MIN), "+", long(0)), &f), format!("Long({})", i64::MIN));
        // Once a double, the rest of the chain is double arithmetic.
        let chain =
            Expr::Arithmetic(Box::new(long(max)), vec![(ArithmeticOp::Mul, long(2)), (ArithmeticOp::Sub, long(max))]);
        assert_eq!(ev0(cmp("=", chain, long(max))), F);
    }

    #[test]
    fn negative_zero_and_infinities() {
        let f = Fields::default();
        assert_eq!(value_of(Expr::Negate(Box::new(double(0.0))), &f), "Double(-0.0)");
        assert_eq!(value_of(Expr::Plus(Box::new(double(-0.0))), &f), "Double(-0.0)");
        assert_eq!(value_of(arith(double(1e308), "*", long(10)), &f), "Double(inf)");
        assert!(value_of(arith(double(f64::INFINITY), "-", double(f64::INFINITY)), &f).contains("NaN"));
        assert_eq!(ev0(cmp("=", arith(double(-0.0), "+", long(0)), long(0))), T);
    }

    #[test]
    fn arithmetic_on_null_or_non_numbers_is_null() {
        let fields = with(&[("s", Value::String("1")), ("b", Value::Bool(true)), ("raw", Value::Bytes(b"1"))]);
        for x in ["missing", "s", "b", "raw"] {
            for op in ["+", "-", "*", "/"] {
                assert_eq!(value_of(arith(prop(x), op, long(1)), &fields), "NULL", "{x} {op} 1");
                assert_eq!(value_of(arith(long(1), op, prop(x)), &fields), "NULL", "1 {op} {x}");
            }
        }
    }

    #[test]
    fn small_integer_types_and_floats_are_numbers() {
        let fields = with(&[
            ("b", Value::Byte(-1)),
            ("s", Value::Short(300)),
            ("i", Value::Int(-70_000)),
            ("f", Value::Float(0.5)),
        ]);
        assert_eq!(ev(cmp("=", arith(prop("b"), "+", prop("s")), long(299)), &fields), T);
        assert_eq!(ev(cmp("<", prop("i"), long(0)), &fields), T);
        assert_eq!(ev(cmp("=", prop("f"), double(0.5)), &fields), T);
        assert_eq!(ev(cmp("=", arith(prop("i"), "/", prop("b")), long(70_000)), &fields), T);
    }

    // ------------------------------------------------------------ BETWEEN, IN, LIKE, IS NULL

    fn between(v: Expr, low: Expr, high: Expr, negated: bool) -> Expr {
        Expr::Between { operand: Box::new(v), low: Box::new(low), high: Box::new(high), negated }
    }

    #[test]
    fn between_is_inclusive_and_three_valued() {
        for (v, inside) in [(14.0, F), (15.0, T), (17.5, T), (19.0, T), (19.5, F)] {
            assert_eq!(ev0(between(double(v), long(15), long(19), false)), inside);
            assert_eq!(ev0(between(double(v), long(15), long(19), true)), inside.map(|b| !b));
        }
        assert_eq!(ev0(between(prop("x"), long(1), long(2), false)), U);
        assert_eq!(ev0(between(prop("x"), long(1), long(2), true)), U);
        assert_eq!(ev0(between(long(3), prop("lo"), long(5), false)), U);
        // FALSE AND UNKNOWN is FALSE.
        assert_eq!(ev0(between(long(3), prop("lo"), long(2), false)), F);
        assert_eq!(ev0(between(long(3), prop("lo"), long(2), true)), T);
        assert_eq!(ev0(between(string("1"), long(1), long(2), false)), U);
        assert_eq!(ev0(between(double(f64::NAN), long(1), long(2), false)), F);
    }

    #[test]
    fn in_lists() {
        let list = || InList::new(["UK", "US", "France", "US"]);
        let country = |c: &'static str, negated| {
            let fields = with(&[("Country", Value::String(c))]);
            ev(Expr::In { operand: Box::new(prop("Country")), list: list(), negated }, &fields)
        };
        assert_eq!(country("UK", false), T);
        assert_eq!(country("France", false), T);
        assert_eq!(country("Peru", false), F);
        assert_eq!(country("uk", false), F);
        assert_eq!(country("Peru", true), T);
        assert_eq!(country("US", true), F);
        assert_eq!(ev0(Expr::In { operand: Box::new(prop("Country")), list: list(), negated: false }), U);
        assert_eq!(ev0(Expr::In { operand: Box::new(prop("Country")), list: list(), negated: true }), U);
        assert_eq!(list().values().collect::<Vec<_>>(), ["France", "UK", "US"]);
    }

    fn like_matches(pattern: &str, escape: Option<char>, value: &'static str) -> Option<bool> {
        ev(like(prop("s"), pattern, escape), &with(&[("s", Value::String(value))]))
    }

    #[test]
    fn like_wildcards() {
        for (pattern, value, expected) in [
            ("12%3", "123", T),
            ("12%3", "12993", T),
            ("12%3", "1234", F),
            ("l_se", "lose", T),
            ("l_se", "loose", F),
            ("%", "", T),
            ("%%", "", T),
            ("_", "", F),
            ("_", "x", T),
            ("_", "é", T),
            ("a%", "abc", T),
            ("%c", "abd", F),
            ("%b%", "abc", T),
            ("%a%a%", "banana", T),
            ("%a%a%a%a%", "banana", F),
            ("abc", "abcd", F),
            ("abc", "xabc", F),
            ("ABC", "abc", F),
            ("a.c", "abc", F),
            ("a*", "a*", T),
            ("[ab]", "[ab]", T),
            ("a%z", "a\n\nz", T),
            ("a_z", "a\nz", T),
            ("%_%_", "ab", T),
            ("%_%_", "a", F),
            ("ü%ß", "üxß", T),
        ] {
            assert_eq!(like_matches(pattern, None, value), expected, "{value:?} LIKE {pattern:?}");
        }
    }

    #[test]
    fn like_escapes() {
        for (pattern, escape, value, expected) in [
            ("\\_%", '\\', "_foo", T),
            ("\\_%", '\\', "xfoo", F),
            ("100!%", '!', "100%", T),
            ("100!%", '!', "1000", F),
            ("%!%%", '!', "a%b", T),
            ("%!%%", '!', "ab", F),
            ("a!!b", '!', "a!b", T),
            ("#_#%", '#', "_%", T),
            ("a.%", '.', "a%", T),
            ("a.%", '.', "ab", F),
            ("x'_", '\'', "x_", T),
            ("%%", '%', "%", T),
            ("%%", '%', "x", F),
        ] {
            assert_eq!(
                like_matches(pattern, Some(escape), value),
                expected,
                "{value:?} LIKE {pattern:?} ESCAPE {escape:?}"
            );
        }
        for (pattern, escape) in [("a!", '!'), ("a!b", '!'), ("!", '!')] {
            assert!(matches!(LikePattern::new(pattern, Some(escape)), Err(Error::InvalidArgument(_))));
        }
        assert!(LikePattern::new("a%", None).unwrap().matches("abc"));
    }

    #[test]
    fn like_negated_and_null() {
        let not_like = |value| {
            let fields = with(&[("s", Value::String(value))]);
            let e = Expr::Like {
                operand: Box::new(prop("s")),
                pattern: LikePattern::new("a%", None).unwrap(),
                negated: true,
            };
            ev(e, &fields)
        };
        assert_eq!(not_like("abc"), F);
        assert_eq!(not_like("bcd"), T);
        assert_eq!(ev0(like(prop("s"), "a%", None)), U);
    }

    #[test]
    fn char_properties_are_one_character_strings() {
        let fields =
            with(&[("c", Value::Char(u16::from(b'x'))), ("lone", Value::Char(0xD800)), ("c2", Value::Char(0xD800))]);
        assert_eq!(ev(cmp("=", prop("c"), string("x")), &fields), T);
        assert_eq!(ev(cmp("=", string("x"), prop("c")), &fields), T);
        assert_eq!(ev(cmp("=", prop("c"), string("xy")), &fields), F);
        assert_eq!(ev(like(prop("c"), "_", None), &fields), T);
        assert_eq!(ev(like(prop("c"), "x%", None), &fields), T);
        assert_eq!(ev(like(prop("c"), "__", None), &fields), F);
        assert_eq!(ev(Expr::In { operand: Box::new(prop("c")), list: InList::new(["x"]), negated: false }, &fields), T);
        // A lone surrogate equals only itself, and matches only wildcards.
        assert_eq!(ev(cmp("=", prop("lone"), prop("c2")), &fields), T);
        assert_eq!(ev(cmp("=", prop("lone"), string("\u{FFFD}")), &fields), F);
        assert_eq!(ev(like(prop("lone"), "_", None), &fields), T);
        assert_eq!(ev(like(prop("lone"), "%", None), &fields), T);
        assert_eq!(ev(like(prop("lone"), "\u{FFFD}", None), &fields), F);
        assert_eq!(
            ev(Expr::In { operand: Box::new(prop("lone")), list: InList::new(["\u{FFFD}"]), negated: true }, &fields),
            T
        );
    }

    #[test]
    fn is_null_is_never_unknown() {
        let fields = with(&[
            ("zero", Value::Long(0)),
            ("empty", Value::String("")),
            ("null", Value::Null),
            ("raw", Value::Bytes(b"")),
        ]);
        for (name, is_null) in [("zero", false), ("empty", false), ("null", true), ("raw", false), ("absent", true)] {
            let test = |negated| ev(Expr::IsNull { operand: Box::new(prop(name)), negated }, &fields);
            assert_eq!(test(false), Some(is_null), "{name} IS NULL");
            assert_eq!(test(true), Some(!is_null), "{name} IS NOT NULL");
        }
    }

    // ------------------------------------------------------------ identifiers and sources

    #[test]
    fn identifiers_resolve_and_are_reported_once() {
        let e = Expr::And(vec![
            cmp("=", Expr::identifier("color"), string("red")),
            cmp(">", Expr::identifier("JMSPriority"), long(3)),
            cmp("<", Expr::identifier("color"), Expr::identifier("JMSXGroupID")),
        ]);
        let s = Selector::new(e).unwrap();
        let names: Vec<_> = s.identifiers().iter().map(Identifier::name).collect();
        assert_eq!(names, ["color", "JMSPriority", "JMSXGroupID"]);
        assert_eq!(s.identifiers()[1], Identifier::Header(HeaderField::Priority));
        assert!(!s.needs_only_pager_header());
        for field in HeaderField::ALL {
            assert_eq!(HeaderField::from_name(field.name()), Some(field));
            let s = Selector::new(Expr::IsNull { operand: Box::new(header(field)), negated: false }).unwrap();
            assert_eq!(s.needs_only_pager_header(), field.in_pager_header(), "{field:?}");
        }
        assert_eq!(HeaderField::from_name("JMSFoo"), None);
        assert_eq!(Identifier::resolve("JMSFoo"), Identifier::Property("JMSFoo".into()));
        assert!(Selector::new(boolean(true)).unwrap().needs_only_pager_header());
    }

    fn encoded(props: &[(&str, Value<'_>)], mode: DeliveryMode) -> Vec<u8> {
        let header = MessageHeader {
            delivery_mode: mode,
            priority: 7,
            id: 9,
            timestamp: 1000,
            expiration: 0,
            delivery_time: 999,
            message_id: Some("ID:1"),
            correlation_id: Some("c-1"),
            message_type: None,
            reply_to: None,
        };
        let mut w = MessageWriter::new(&header).unwrap();
        for (name, value) in props {
            w.property(name, *value).unwrap();
        }
        w.finish(Body::Text(Some("body"))).unwrap()
    }

    #[test]
    fn encoded_messages_answer_headers_and_properties() {
        let data = encoded(&[("color", Value::String("red")), ("weight", Value::Long(12))], DeliveryMode::Persistent);
        let check =
            |e: Expr, redelivery_count| Selector::new(e).unwrap().matches_encoded(&data, redelivery_count).unwrap();
        assert!(check(Expr::And(vec![cmp("=", prop("color"), string("red")), cmp(">", prop("weight"), long(10))]), 0));
        assert!(check(cmp("=", header(HeaderField::DeliveryMode), string("PERSISTENT")), 0));
        assert!(check(cmp("=", header(HeaderField::Priority), long(7)), 0));
        assert!(check(cmp("=", header(HeaderField::MessageId), string("ID:1")), 0));
        assert!(check(cmp("=", header(HeaderField::Timestamp), long(1000)), 0));
        assert!(check(cmp("=", header(HeaderField::CorrelationId), string("c-1")), 0));
        assert!(check(Expr::IsNull { operand: Box::new(header(HeaderField::Type)), negated: false }, 0));
        assert!(check(cmp("<", header(HeaderField::DeliveryTime), header(HeaderField::Timestamp)), 0));
        assert!(check(cmp("=", header(HeaderField::Expiration), long(0)), 0));
        assert!(check(cmp("=", header(HeaderField::Redelivered), boolean(false)), 0));
        assert!(check(cmp("=", header(HeaderField::Redelivered), boolean(true)), 2));
        assert!(!check(cmp("=", prop("JMSPriority"), long(7)), 0), "a header is not a property");
        let non_persistent = encoded(&[], DeliveryMode::NonPersistent);
        let s = Selector::new(cmp("=", header(HeaderField::DeliveryMode), string("NON_PERSISTENT"))).unwrap();
        assert!(s.matches_encoded(&non_persistent, 0).unwrap());
    }

    #[test]
    fn malformed_messages_fail_only_when_read() {
        let mut data = encoded(&[("a", Value::Long(1)), ("b", Value::Long(2))], DeliveryMode::Persistent);
        // Damage b's tag: a selector on the header alone still evaluates.
        let b_tag = data.len() - 4 - 4 - 9;
        data[b_tag] = b'?';
        let header_only = Selector::new(cmp("=", header(HeaderField::Priority), long(7))).unwrap();
        assert!(header_only.matches_encoded(&data, 0).unwrap());
        let on_a = Selector::new(cmp("=", prop("a"), long(1))).unwrap();
        assert!(matches!(on_a.matches_encoded(&data, 0), Err(Error::Malformed { .. })));
        assert!(matches!(header_only.matches_encoded(&data[..10], 0), Err(Error::Malformed { .. })));
        assert!(matches!(header_only.matches_encoded(&[], 0), Err(Error::Malformed { .. })));
    }

    #[test]
    fn pager_header_evaluates_header_only_selectors() {
        let data = encoded(&[("x", Value::Long(1))], DeliveryMode::Persistent);
        let fields = crate::broker::format::peek(&data).unwrap();
        let pager = PagerHeader::new(&fields, 1);
        let s = Selector::new(Expr::And(vec![
            cmp("=", header(HeaderField::Priority), long(7)),
            cmp("=", header(HeaderField::Redelivered), boolean(true)),
            cmp("=", header(HeaderField::CorrelationId), string("c-1")),
            Expr::IsNull { operand: Box::new(header(HeaderField::Type)), negated: false },
            cmp("=", header(HeaderField::Timestamp), long(1000)),
            cmp("=", header(HeaderField::DeliveryTime), long(999)),
            cmp("=", header(HeaderField::Expiration), long(0)),
        ]))
        .unwrap();
        assert!(s.needs_only_pager_header());
        assert!(s.matches(&pager).unwrap());
        // Through a trait object too.
        let dynamic: &dyn MessageFields = &pager;
        assert!(s.matches(dynamic).unwrap());
        for e in [cmp("=", prop("x"), long(1)), cmp("=", header(HeaderField::MessageId), string("ID:1"))] {
            let s = Selector::new(e).unwrap();
            assert!(!s.needs_only_pager_header());
            assert!(matches!(s.matches(&pager), Err(Error::InvalidArgument(_))));
        }
    }

    // ------------------------------------------------------------ depth

    fn nots(n: usize) -> Expr {
        let mut e = boolean(true);
        for _ in 0..n {
            e = not(e);
        }
        e
    }

    #[test]
    fn deepest_allowed_tree_evaluates_and_one_more_level_is_refused() {
        let deepest = Selector::new(nots(MAX_DEPTH - 1)).unwrap();
        assert_eq!(deepest.depth(), MAX_DEPTH);
        assert_eq!(deepest.evaluate(&Fields::default()).unwrap(), Some(MAX_DEPTH % 2 == 1));
        assert!(matches!(Selector::new(nots(MAX_DEPTH)), Err(Error::InvalidArgument(_))));

        // Arithmetic at the deepest level, in a thread with a small stack: evaluation stays shallow.
        let mut e = cmp("=", arith(prop("x"), "+", long(1)), long(2));
        for _ in 0..MAX_DEPTH - 3 {
            e = Expr::And(vec![e]);
        }
        let s = Selector::new(e).unwrap();
        assert_eq!(s.depth(), MAX_DEPTH);
        let fields = with(&[("x", Value::Long(1))]);
        std::thread::scope(|scope| {
            std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn_scoped(scope, || assert_eq!(s.evaluate(&fields).unwrap(), T))
                .unwrap()
                .join()
                .unwrap();
        });
    }

    #[test]
    fn empty_and_or_are_refused() {
        assert!(Selector::new(Expr::And(vec![])).is_err());
        assert!(Selector::new(not(Expr::Or(vec![]))).is_err());
    }

    #[test]
    fn a_very_deep_tree_is_refused_and_dropped_without_recursion() {
        // Deep enough that recursive checking or dropping would overflow a small stack.
        std::thread::Builder::new()
            .stack_size(128 * 1024)
            .spawn(|| {
                assert!(Selector::new(nots(200_000)).is_err());
                drop(nots(200_000));
            })
            .unwrap()
            .join()
            .unwrap();
    }

    // ------------------------------------------------------------ LIKE against a reference

    /// A plain recursive matcher over characters, the reference for the iterative one.
    fn reference_like(pattern: &[LikeToken], text: &[char]) -> bool {
        match pattern.split_first() {
            None => text.is_empty(),
            Some((LikeToken::AnyRun, rest)) => (0..=text.len()).any(|i| reference_like(rest, &text[i..])),
            Some((LikeToken::AnyOne, rest)) => !text.is_empty() && reference_like(rest, &text[1..]),
            Some((LikeToken::Char(c), rest)) => text.first() == Some(c) && reference_like(rest, &text[1..]),
        }
    }

    proptest! {
        #[test]
        fn like_agrees_with_a_recursive_reference(pattern in "[ab%_]{0,8}", text in "[abé]{0,10}") {
            let compiled = LikePattern::new(&pattern, None).unwrap();
            let chars: Vec<char> = text.chars().collect();
            prop_assert_eq!(compiled.matches(&text), reference_like(&compiled.tokens, &chars));
        }

        #[test]
        fn long_double_comparison_is_exact(x in any::<i64>(), y in any::<f64>(), near in any::<bool>()) {
            // Half the cases compare with a double near x, where rounding would show.
            let y = if near { x as f64 } else { y };
            let expected = if y.is_nan() {
                None
            } else if y >= TWO_POW_63 {
                Some(Ordering::Less)
            } else if y < -TWO_POW_63 {
                Some(Ordering::Greater)
            } else {
                // Exact in 128-bit fixed point: y is a multiple of 2^-1074, but comparing
                // x with floor(y) and then the fraction is the definition we check against.
                let floor = y.floor();
                Some(match i128::from(x).cmp(&(floor as i128)) {
                    Ordering::Equal if y > floor => Ordering::Less,
                    other => other,
                })
            };
            prop_assert_eq!(compare_long_double(x, y), expected);
        }
    }
}
