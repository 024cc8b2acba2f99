//! Avro datum scanner for spate's columnar Avro decoder.
//!
//! The columnar decoder frames a batch of bare Avro datums into a container file and reads
//! it with a Rust reader that reserves memory for the item count an array or map block
//! declares. A corrupt datum declaring billions of items makes that allocation fail and
//! the process aborts. `scan` walks every datum of a framed batch against the writer
//! schema first and returns the indices of the datums that are not exactly one
//! well-formed datum, so that none of them reaches the reader.
//!
//! The schema comes as a flat program of `i64` (compiled by `spate_avro._scan`), one node
//! after another, node 0 the root. Each node is an opcode and its arguments; named types
//! are node indices, so recursive schemas are plain jumps:
//!
//! | opcode | node                                  | arguments                          |
//! |--------|---------------------------------------|------------------------------------|
//! | 0..=7  | null, boolean, int, long, float, double, bytes, string | none      |
//! | 8      | fixed                                 | size                               |
//! | 9      | enum                                  | number of symbols                  |
//! | 10     | array                                 | item node, item minimum size       |
//! | 11     | map                                   | value node, entry minimum size     |
//! | 12     | union                                 | n, then n branch nodes             |
//! | 13     | record                                | n, then n field nodes              |
//!
//! A datum is refused when it is truncated, has trailing bytes, holds a malformed or
//! over-long varint (more than ten bytes, or more than 64 bits), a boolean byte other
//! than 0 or 1, an out-of-range union branch or enum index, a negative or over-long
//! bytes/string length, a string that is not UTF-8, or an array/map block count that
//! cannot fit: a count whose items, each at least the item's minimum encoded size, do
//! not fit in the bytes left (or, for a negative count, in the block's byte size, which
//! must itself be non-negative, fit, and be exactly what the items take). Items whose
//! minimum encoded size is 0 (null, fixed(0), records of such) are capped at
//! `ZERO_SIZE_ITEMS` per datum over all its arrays and maps, and nesting at `MAX_DEPTH`
//! levels.

use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::prelude::*;

/// Items of zero minimum size one datum may hold (over all its arrays and maps).
const ZERO_SIZE_ITEMS: u64 = 1 << 20;
/// Nesting levels (records, arrays, maps, unions) a datum may have.
const MAX_DEPTH: u32 = 1000;

const NULL: i64 = 0;
const BOOLEAN: i64 = 1;
const INT: i64 = 2;
const LONG: i64 = 3;
const FLOAT: i64 = 4;
const DOUBLE: i64 = 5;
const BYTES: i64 = 6;
const STRING: i64 = 7;
const FIXED: i64 = 8;
const ENUM: i64 = 9;
const ARRAY: i64 = 10;
const MAP: i64 = 11;
const UNION: i64 = 12;
const RECORD: i64 = 13;

/// A datum is not exactly one well-formed datum of the schema.
struct Bad;

type Step = Result<(), Bad>;

/// A compiled writer schema (see the module documentation), checked once when built so
/// that a scan never indexes outside it.
#[pyclass(frozen, module = "spate_avro_native._native")]
struct Program {
    ops: Vec<i64>,
}

fn node_refs(ops: &[i64], at: usize) -> Result<(usize, Vec<i64>), String> {
    let arg = |i: usize| -> Result<i64, String> {
        ops.get(at + i).copied().ok_or_else(|| format!("node {at} is cut short"))
    };
    let op = arg(0)?;
    Ok(match op {
        NULL..=STRING => (1, vec![]),
        FIXED | ENUM => {
            if arg(1)? < 0 {
                return Err(format!("node {at}: negative size"));
            }
            (2, vec![])
        }
        ARRAY | MAP => {
            if arg(2)? < 0 {
                return Err(format!("node {at}: negative minimum size"));
            }
            (3, vec![arg(1)?])
        }
        UNION | RECORD => {
            let n = arg(1)?;
            if n < 0 {
                return Err(format!("node {at}: negative count"));
            }
            let n = n as usize;
            let refs = (0..n).map(|i| arg(2 + i)).collect::<Result<Vec<_>, _>>()?;
            (2 + n, refs)
        }
        _ => return Err(format!("node {at}: unknown opcode {op}")),
    })
}

#[pymethods]
impl Program {
    #[new]
    fn new(ops: Vec<i64>) -> PyResult<Self> {
        let mut starts = vec![false; ops.len()];
        let mut refs = Vec::new();
        let mut at = 0;
        while at < ops.len() {
            let (width, more) = node_refs(&ops, at).map_err(PyValueError::new_err)?;
            starts[at] = true;
            refs.extend(more);
            at += width;
        }
        if ops.is_empty() {
            return Err(PyValueError::new_err("an empty program"));
        }
        for r in refs {
            if r < 0 || r as usize >= ops.len() || !starts[r as usize] {
                return Err(PyValueError::new_err(format!("a jump to {r} is not a node")));
            }
        }
        Ok(Program { ops })
    }
}

struct Cursor<'a> {
    ops: &'a [i64],
    data: &'a [u8],
    pos: usize,
    /// Items of zero minimum size the rest of the datum may still declare.
    zero_sized_left: u64,
}

impl Cursor<'_> {
    fn left(&self) -> u64 {
        (self.data.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64) -> Result<&[u8], Bad> {
        if n > self.left() {
            return Err(Bad);
        }
        let start = self.pos;
        self.pos += n as usize;
        Ok(&self.data[start..self.pos])
    }

    /// A zig-zag varint of at most ten bytes holding at most 64 bits.
    fn varint(&mut self) -> Result<i64, Bad> {
        let mut value: u64 = 0;
        for i in 0..10 {
            let byte = *self.data.get(self.pos).ok_or(Bad)?;
            self.pos += 1;
            if i == 9 && byte > 1 {
                return Err(Bad);
            }
            value |= u64::from(byte & 0x7F) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok((value >> 1) as i64 ^ -((value & 1) as i64));
            }
        }
        Err(Bad)
    }

    fn length(&mut self) -> Result<u64, Bad> {
        let n = self.varint()?;
        if n < 0 || n as u64 > self.left() {
            return Err(Bad);
        }
        Ok(n as u64)
    }

    fn index(&mut self, n: i64) -> Step {
        let i = self.varint()?;
        if i < 0 || i >= n {
            return Err(Bad);
        }
        Ok(())
    }

    fn node(&mut self, at: usize, depth: u32) -> Step {
        let ops = self.ops;
        match ops[at] {
            NULL => Ok(()),
            BOOLEAN => match self.take(1)?[0] {
                0 | 1 => Ok(()),
                _ => Err(Bad),
            },
            INT | LONG => self.varint().map(drop),
            FLOAT => self.take(4).map(drop),
            DOUBLE => self.take(8).map(drop),
            BYTES => {
                let n = self.length()?;
                self.take(n).map(drop)
            }
            STRING => self.string(),
            FIXED => self.take(ops[at + 1] as u64).map(drop),
            ENUM => self.index(ops[at + 1]),
            ARRAY | MAP => {
                if depth >= MAX_DEPTH {
                    return Err(Bad);
                }
                self.blocks(ops[at], ops[at + 1] as usize, ops[at + 2] as u64, depth + 1)
            }
            UNION => {
                if depth >= MAX_DEPTH {
                    return Err(Bad);
                }
                let i = self.varint()?;
                if i < 0 || i >= ops[at + 1] {
                    return Err(Bad);
                }
                self.node(ops[at + 2 + i as usize] as usize, depth + 1)
            }
            _ => {
                // RECORD (the program was checked when built)
                if depth >= MAX_DEPTH {
                    return Err(Bad);
                }
                let n = ops[at + 1] as usize;
                for field in &ops[at + 2..at + 2 + n] {
                    self.node(*field as usize, depth + 1)?;
                }
                Ok(())
            }
        }
    }

    fn string(&mut self) -> Step {
        let n = self.length()?;
        let bytes = self.take(n)?;
        if bytes.is_ascii() || std::str::from_utf8(bytes).is_ok() {
            Ok(())
        } else {
            Err(Bad)
        }
    }

    /// The blocks of an array (items of node `item`) or map (a string key, then a value
    /// of node `item`), each item or entry at least `least` bytes.
    fn blocks(&mut self, kind: i64, item: usize, least: u64, depth: u32) -> Step {
        loop {
            let count = self.varint()?;
            if count == 0 {
                return Ok(());
            }
            let n = count.unsigned_abs();
            let end = if count < 0 {
                let size = self.length()?;
                Some((self.pos as u64 + size) as usize)
            } else {
                None
            };
            let room = match end {
                Some(end) => (end - self.pos) as u64,
                None => self.left(),
            };
            if u128::from(n) * u128::from(least) > u128::from(room) {
                return Err(Bad);
            }
            if least == 0 {
                if n > self.zero_sized_left {
                    return Err(Bad);
                }
                self.zero_sized_left -= n;
            }
            for _ in 0..n {
                if kind == MAP {
                    self.string()?;
                }
                self.node(item, depth)?;
            }
            if let Some(end) = end {
                if self.pos != end {
                    return Err(Bad);
                }
            }
        }
    }
}

/// A contiguous read-only view of a buffer-protocol object (no copy).
fn view(obj: &Bound<'_, PyAny>) -> PyResult<PyUntypedBuffer> {
    let buffer = PyUntypedBuffer::get(obj)?;
    if !buffer.is_c_contiguous() {
        return Err(PyBufferError::new_err("a contiguous buffer is needed"));
    }
    Ok(buffer)
}

fn bytes_of(buffer: &PyUntypedBuffer) -> &[u8] {
    let len = buffer.len_bytes();
    if len == 0 {
        return &[];
    }
    // SAFETY: a C-contiguous buffer of `len` bytes, kept alive (and its exporter's memory
    // pinned) by `buffer` for the lifetime of the slice.
    unsafe { std::slice::from_raw_parts(buffer.buf_ptr() as *const u8, len) }
}

/// Scan the datums of a framed batch: `body` holds the elements back to back, `ends` the
/// `count + 1` native-endian `i64` offsets of the elements (the first one where `body`
/// starts), each element a datum followed by `trailer` bytes the scan ignores. Returns the
/// indices of the datums the scan refuses, in order. The GIL is released while scanning.
#[pyfunction]
fn scan(
    py: Python<'_>,
    program: &Program,
    body: &Bound<'_, PyAny>,
    ends: &Bound<'_, PyAny>,
    trailer: usize,
) -> PyResult<Vec<usize>> {
    let body_buffer = view(body)?;
    let ends_buffer = view(ends)?;
    let data = bytes_of(&body_buffer);
    let raw_ends = bytes_of(&ends_buffer);
    if raw_ends.len() % 8 != 0 || raw_ends.is_empty() {
        return Err(PyValueError::new_err("ends must hold count + 1 int64 offsets"));
    }
    let offsets: Vec<i64> = raw_ends
        .chunks_exact(8)
        .map(|c| i64::from_ne_bytes(c.try_into().expect("8 bytes")))
        .collect();
    let first = offsets[0];
    for pair in offsets.windows(2) {
        let (start, stop) = (pair[0] - first, pair[1] - first);
        if start < 0 || stop - start < trailer as i64 || stop as u64 > data.len() as u64 {
            return Err(PyValueError::new_err("ends do not fit the body and trailer"));
        }
    }
    let ops = &program.ops[..];
    Ok(py.detach(|| {
        let mut bad = Vec::new();
        for (i, pair) in offsets.windows(2).enumerate() {
            let start = (pair[0] - first) as usize;
            let stop = (pair[1] - first) as usize - trailer;
            let mut cursor = Cursor {
                ops,
                data: &data[start..stop],
                pos: 0,
                zero_sized_left: ZERO_SIZE_ITEMS,
            };
            if cursor.node(0, 0).is_err() || cursor.pos != stop - start {
                bad.push(i);
            }
        }
        bad
    }))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Program>()?;
    m.add_function(wrap_pyfunction!(scan, m)?)?;
    m.add("ZERO_SIZE_ITEMS", ZERO_SIZE_ITEMS)?;
    m.add("MAX_DEPTH", MAX_DEPTH)?;
    Ok(())
}
