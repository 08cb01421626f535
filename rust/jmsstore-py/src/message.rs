//! Reading an encoded broker message (the format `jmsstore.broker.message`
//! documents and writes) into Python values in one call: the consumer's
//! hand-out runs it once per message, holding the GIL, where a reader in
//! Python costs several times as much.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
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
