//! Reading and writing an encoded broker message (the format
//! `jmsstore.broker.message` documents) in one call each: every send writes
//! one and every hand-out reads one, holding the GIL, where Python's reader
//! and writer cost several times as much. Both leave to Python what is not
//! strict UTF-8 (its codec allows encoded surrogates) and, when writing,
//! any value it would refuse, so that the errors stay Python's.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use pyo3::IntoPyObjectExt;

const FORMAT_VERSION: u8 = 1;
const FIXED_LEN: usize = 4 + 8 * 4;
const NO_STRING: u32 = u32::MAX;

/// Why reading stopped: a malformed message (a `ValueError` whose text
/// Python's `MessageFormatError` takes as it is), or a string that is not strict UTF-8
/// (Python's reader, which allows encoded surrogates, reads the message).
enum Stop {
    Malformed(String),
    NotStrictUtf8,
}

impl From<PyErr> for Stop {
    fn from(e: PyErr) -> Self {
        Stop::Malformed(e.to_string())
    }
}

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], Stop> {
        let end = self.pos.checked_add(n).filter(|&end| end <= self.data.len());
        let Some(end) = end else {
            return Err(Stop::Malformed(format!("malformed message: {what} runs past the end")));
        };
        let bytes = &self.data[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], Stop> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    fn u32(&mut self) -> Result<u32, Stop> {
        Ok(u32::from_le_bytes(self.array("a length")?))
    }

    fn str<'py>(&mut self, py: Python<'py>) -> Result<Option<Bound<'py, PyString>>, Stop> {
        let n = self.u32()?;
        if n == NO_STRING {
            return Ok(None);
        }
        let bytes = self.take(n as usize, "a string")?;
        let text = std::str::from_utf8(bytes).map_err(|_| Stop::NotStrictUtf8)?;
        Ok(Some(PyString::new(py, text)))
    }

    /// A property, map or stream value: a tag, then the value.
    fn value<'py>(&mut self, py: Python<'py>) -> Result<Bound<'py, PyAny>, Stop> {
        let [tag] = self.array::<1>("a value")?;
        Ok(match tag {
            b'N' => py.None().into_bound(py),
            b'S' => self.str(py)?.map_or_else(|| py.None().into_bound(py), Bound::into_any),
            b'Y' => {
                let n = self.u32()? as usize;
                PyBytes::new(py, self.take(n, "bytes")?).into_any()
            }
            b'Z' => (self.array::<1>("a bool")?[0] != 0).into_bound_py_any(py)?,
            b'b' => i8::from_le_bytes(self.array("a byte")?).into_bound_py_any(py)?,
            b's' => i16::from_le_bytes(self.array("a short")?).into_bound_py_any(py)?,
            b'i' => i32::from_le_bytes(self.array("an int")?).into_bound_py_any(py)?,
            b'l' => i64::from_le_bytes(self.array("a long")?).into_bound_py_any(py)?,
            b'f' => f64::from(f32::from_le_bytes(self.array("a float")?)).into_bound_py_any(py)?,
            b'd' => f64::from_le_bytes(self.array("a double")?).into_bound_py_any(py)?,
            b'c' => {
                let unit = u16::from_le_bytes(self.array("a char")?);
                // A Java char: one UTF-16 unit, a lone surrogate included (as Python's chr).
                match char::from_u32(u32::from(unit)) {
                    Some(c) => PyString::new(py, c.encode_utf8(&mut [0; 4])).into_any(),
                    None => return Err(Stop::NotStrictUtf8),
                }
            }
            other => return Err(Stop::Malformed(format!("malformed message: unknown value tag {other}"))),
        })
    }

    /// A count, then (name, value) pairs: the properties, or a map body. A
    /// missing name is the empty one (as the Python reader has it).
    fn pairs<'py>(&mut self, py: Python<'py>) -> Result<Bound<'py, PyDict>, Stop> {
        let pairs = PyDict::new(py);
        for _ in 0..self.count()? {
            let name = self.str(py)?;
            let value = self.value(py)?;
            match name {
                Some(name) => pairs.set_item(name, value)?,
                None => pairs.set_item("", value)?,
            }
        }
        Ok(pairs)
    }

    fn count(&mut self) -> Result<usize, Stop> {
        let n = self.u32()? as usize;
        // Every entry takes at least a byte: a count past the end is damage, not a size to allocate.
        if n > self.data.len() - self.pos {
            return Err(Stop::Malformed(format!("malformed message: {n} entries cannot fit")));
        }
        Ok(n)
    }
}

fn none_or<'py>(py: Python<'py>, s: Option<Bound<'py, PyString>>) -> Bound<'py, PyAny> {
    s.map_or_else(|| py.None().into_bound(py), Bound::into_any)
}

fn read<'py>(py: Python<'py>, data: &[u8]) -> Result<Bound<'py, PyTuple>, Stop> {
    if data.len() < FIXED_LEN || data[0] != FORMAT_VERSION {
        let version = data.first().map_or("nothing".to_string(), |v| v.to_string());
        return Err(Stop::Malformed(format!(
            "not a jmsstore message of format version {FORMAT_VERSION} (starts with {version})"
        )));
    }
    let mut r = Reader { data, pos: 4 };
    let (body_type, mode, priority) = (data[1], data[2], data[3]);
    let id = u64::from_le_bytes(r.array("the id")?);
    let timestamp = i64::from_le_bytes(r.array("the timestamp")?);
    let expiration = i64::from_le_bytes(r.array("the expiration")?);
    let delivery_time = i64::from_le_bytes(r.array("the delivery time")?);
    let message_id = r.str(py)?;
    let correlation_id = r.str(py)?;
    let message_type = r.str(py)?;
    let reply_to = r.str(py)?;
    let properties = r.pairs(py)?;
    let body = match body_type {
        0 => py.None().into_bound(py),
        1 => none_or(py, r.str(py)?),
        2 => PyBytes::new(py, &data[r.pos..]).into_any(),
        3 => r.pairs(py)?.into_any(),
        4 => {
            let values = PyList::empty(py);
            for _ in 0..r.count()? {
                values.append(r.value(py)?)?;
            }
            values.into_any()
        }
        other => return Err(Stop::Malformed(format!("unknown body type {other}"))),
    };
    let fields: [Bound<'py, PyAny>; 13] = [
        body_type.into_bound_py_any(py)?,
        mode.into_bound_py_any(py)?,
        priority.into_bound_py_any(py)?,
        id.into_bound_py_any(py)?,
        timestamp.into_bound_py_any(py)?,
        expiration.into_bound_py_any(py)?,
        delivery_time.into_bound_py_any(py)?,
        none_or(py, message_id),
        none_or(py, correlation_id),
        none_or(py, message_type),
        none_or(py, reply_to),
        properties.into_any(),
        body,
    ];
    Ok(PyTuple::new(py, fields)?)
}

/// The fields of an encoded message: `(body_type, delivery_mode, priority,
/// id, timestamp, expiration, delivery_time, message_id, correlation_id,
/// type, reply_to, properties, body)`, the body as its type keeps it (None,
/// str, bytes, dict, list). None if a string is not strict UTF-8 (Python's
/// reader takes those); `ValueError` if the message is malformed.
#[pyfunction]
pub fn read_message<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Option<Bound<'py, PyTuple>>> {
    match read(py, data) {
        Ok(fields) => Ok(Some(fields)),
        Err(Stop::NotStrictUtf8) => Ok(None),
        Err(Stop::Malformed(why)) => Err(PyValueError::new_err(why)),
    }
}

/// What the writer leaves to Python's (which encodes it, or raises its own error).
struct NotMine;

impl From<PyErr> for NotMine {
    fn from(_: PyErr) -> Self {
        NotMine
    }
}

struct Writer {
    out: Vec<u8>,
}

impl Writer {
    fn u32(&mut self, n: usize) -> Result<(), NotMine> {
        let n = u32::try_from(n).map_err(|_| NotMine)?;
        self.out.extend_from_slice(&n.to_le_bytes());
        Ok(())
    }

    /// A str, or None.
    fn str(&mut self, value: &Bound<'_, PyAny>) -> Result<(), NotMine> {
        if value.is_none() {
            self.out.extend_from_slice(&NO_STRING.to_le_bytes());
            return Ok(());
        }
        let text = value.cast::<PyString>().map_err(|_| NotMine)?.to_str()?;
        self.u32(text.len())?;
        self.out.extend_from_slice(text.as_bytes());
        Ok(())
    }

    /// A property, map or stream value, as Python's `_put_value` writes it.
    fn value(&mut self, value: &Bound<'_, PyAny>) -> Result<(), NotMine> {
        if value.is_none() {
            self.out.push(b'N');
        } else if let Ok(flag) = value.cast::<PyBool>() {
            self.out.extend_from_slice(&[b'Z', u8::from(flag.is_true())]);
        } else if value.is_instance_of::<PyInt>() {
            self.out.push(b'l');
            self.out.extend_from_slice(&value.extract::<i64>()?.to_le_bytes());
        } else if value.is_instance_of::<PyFloat>() {
            self.out.push(b'd');
            self.out.extend_from_slice(&value.extract::<f64>()?.to_le_bytes());
        } else if value.is_instance_of::<PyString>() {
            self.out.push(b'S');
            self.str(value)?;
        } else if let Ok(bytes) = value.cast::<PyBytes>() {
            self.out.push(b'Y');
            self.u32(bytes.as_bytes().len())?;
            self.out.extend_from_slice(bytes.as_bytes());
        } else {
            return Err(NotMine);
        }
        Ok(())
    }

    fn pairs(&mut self, pairs: &Bound<'_, PyAny>) -> Result<(), NotMine> {
        let pairs = pairs.cast::<PyDict>().map_err(|_| NotMine)?;
        self.u32(pairs.len())?;
        for (name, value) in pairs.iter() {
            self.str(&name)?;
            self.value(&value)?;
        }
        Ok(())
    }
}

/// The header fields a send writes, as Python passes them: (format version,
/// body type, delivery mode, priority, id, timestamp, expiration, delivery time).
type Fixed = (u8, u8, u8, u8, u64, i64, i64, i64);

fn write(
    fixed: &Bound<'_, PyTuple>,
    strings: [&Bound<'_, PyAny>; 4],
    properties: &Bound<'_, PyAny>,
    body: &Bound<'_, PyAny>,
    body_len: usize,
) -> Result<Vec<u8>, NotMine> {
    let (version, body_type, mode, priority, id, timestamp, expiration, delivery_time): Fixed = fixed.extract()?;
    let mut w = Writer { out: Vec::with_capacity(FIXED_LEN + 64 + body_len) };
    w.out.extend_from_slice(&[version, body_type, mode, priority]);
    for n in [id.to_le_bytes(), timestamp.to_le_bytes(), expiration.to_le_bytes(), delivery_time.to_le_bytes()] {
        w.out.extend_from_slice(&n);
    }
    for s in strings {
        w.str(s)?;
    }
    w.pairs(properties)?;
    match body_type {
        0 => {}
        1 => w.str(body)?,
        2 => w.out.extend_from_slice(body.cast::<PyBytes>().map_err(|_| NotMine)?.as_bytes()),
        3 => w.pairs(body)?,
        4 => {
            let values = body.cast::<PyList>().map_err(|_| NotMine)?;
            w.u32(values.len())?;
            for value in values.iter() {
                w.value(&value)?;
            }
        }
        _ => return Err(NotMine),
    }
    Ok(w.out)
}

/// A message's bytes from its fields: `fixed` is (format version, body
/// type, delivery mode, priority, id, timestamp, expiration, delivery
/// time), then the message id, correlation id, type and reply-to text (str
/// or None), the properties (a dict) and the body as its type keeps it
/// (None, str or None, bytes, dict, list). None when a string is not strict
/// UTF-8, or a field or value is one Python's writer handles (or refuses)
/// itself.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn write_message<'py>(
    py: Python<'py>,
    fixed: &Bound<'py, PyTuple>,
    message_id: &Bound<'py, PyAny>,
    correlation_id: &Bound<'py, PyAny>,
    message_type: &Bound<'py, PyAny>,
    reply_to: &Bound<'py, PyAny>,
    properties: &Bound<'py, PyAny>,
    body: &Bound<'py, PyAny>,
) -> Option<Bound<'py, PyBytes>> {
    let body_len = body.cast::<PyBytes>().map_or(0, |b| b.as_bytes().len());
    let strings = [message_id, correlation_id, message_type, reply_to];
    let out = write(fixed, strings, properties, body, body_len).ok()?;
    Some(PyBytes::new(py, &out))
}
