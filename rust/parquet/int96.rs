//! INT96 timestamps (the deprecated Impala/Spark encoding: nanoseconds of the day and a
//! Julian day) read at a chosen unit, never as a wrapped value.
//!
//! arrow-rs, like pyarrow, converts INT96 to a 64-bit count of the unit with wrapping
//! arithmetic: in nanoseconds that only spans the years 1677-2262, and Spark writes
//! dates far outside it (`9999-12-31` is common as "no end"). pyarrow's answer is the
//! `coerce_int96_timestamp_unit` read option; youmu offers the same keyword, and checks
//! that every value fits the unit: an INT96 leaf read in ns or us is also decoded in
//! seconds (which cannot wrap: a Julian day is an `i32`), and the two must agree to
//! within one second — a wrapped value is off by a multiple of 2^64 units. The check
//! costs a second decode of the INT96 columns only, and only when their unit can wrap.

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, TimestampSecondArray};
use arrow_schema::{DataType, Field, FieldRef, Fields, Schema, TimeUnit};
use parquet::basic::Type as PhysicalType;
use parquet::schema::types::SchemaDescriptor;
use std::sync::Arc;

use crate::error::{Error, Result};

/// `"s" | "ms" | "us" | "ns"` (pyarrow's spelling) to a unit.
pub fn parse_unit(s: &str) -> Result<TimeUnit> {
    match s {
        "s" => Ok(TimeUnit::Second),
        "ms" => Ok(TimeUnit::Millisecond),
        "us" => Ok(TimeUnit::Microsecond),
        "ns" => Ok(TimeUnit::Nanosecond),
        other => Err(Error::InvalidArgument(format!(
            "coerce_int96_timestamp_unit must be 's', 'ms', 'us' or 'ns', got {other:?}"
        ))),
    }
}

pub fn unit_name(u: TimeUnit) -> &'static str {
    match u {
        TimeUnit::Second => "s",
        TimeUnit::Millisecond => "ms",
        TimeUnit::Microsecond => "us",
        TimeUnit::Nanosecond => "ns",
    }
}

/// Units per second.
fn per_second(u: TimeUnit) -> i128 {
    match u {
        TimeUnit::Second => 1,
        TimeUnit::Millisecond => 1_000,
        TimeUnit::Microsecond => 1_000_000,
        TimeUnit::Nanosecond => 1_000_000_000,
    }
}

/// How a file's INT96 columns are read.
#[derive(Debug, Default)]
pub struct Plan {
    /// The Arrow schema to read with (`None`: the derived one is right as it is).
    pub read: Option<Schema>,
    /// The same schema with every INT96 leaf in seconds, for the overflow check
    /// (`None`: no INT96 leaf is read in a unit that can wrap).
    pub seconds: Option<Schema>,
    /// Top-level columns that hold an INT96 leaf.
    pub roots: Vec<usize>,
}

/// Walk `dt`'s leaves in depth-first order (the order of the Parquet leaf columns),
/// replacing each with `f(leaf index, leaf type)`.
fn map_leaves(dt: &DataType, next: &mut usize, f: &mut dyn FnMut(usize, &DataType) -> DataType) -> DataType {
    let field = |fd: &FieldRef, next: &mut usize, f: &mut dyn FnMut(usize, &DataType) -> DataType| -> FieldRef {
        Arc::new(fd.as_ref().clone().with_data_type(map_leaves(fd.data_type(), next, f)))
    };
    match dt {
        DataType::Struct(fields) => {
            DataType::Struct(fields.iter().map(|fd| field(fd, next, f)).collect::<Vec<_>>().into())
        }
        DataType::List(fd) => DataType::List(field(fd, next, f)),
        DataType::LargeList(fd) => DataType::LargeList(field(fd, next, f)),
        DataType::ListView(fd) => DataType::ListView(field(fd, next, f)),
        DataType::LargeListView(fd) => DataType::LargeListView(field(fd, next, f)),
        DataType::FixedSizeList(fd, n) => DataType::FixedSizeList(field(fd, next, f), *n),
        DataType::Map(fd, sorted) => DataType::Map(field(fd, next, f), *sorted),
        leaf => {
            let i = *next;
            *next += 1;
            f(i, leaf)
        }
    }
}

/// The plan for reading a file's INT96 leaves at `unit` (`None`: as arrow-rs derives
/// them — the unit the file's embedded Arrow schema records, else nanoseconds).
pub fn plan(descr: &SchemaDescriptor, schema: &Schema, unit: Option<TimeUnit>) -> std::result::Result<Plan, String> {
    let is_int96 = |leaf: usize| descr.column(leaf).physical_type() == PhysicalType::INT96;
    if !(0..descr.num_columns()).any(is_int96) {
        return Ok(Plan::default());
    }
    let mut roots = vec![];
    let mut can_wrap = false;
    let mut next = 0usize;
    let mut read_fields: Vec<Field> = vec![];
    let mut second_fields: Vec<Field> = vec![];
    for (root, fd) in schema.fields().iter().enumerate() {
        let start = next;
        let read_type = map_leaves(fd.data_type(), &mut next, &mut |leaf, dt| match dt {
            DataType::Timestamp(u, tz) if leaf < descr.num_columns() && is_int96(leaf) => {
                let u = unit.unwrap_or(*u);
                can_wrap |= matches!(u, TimeUnit::Nanosecond | TimeUnit::Microsecond);
                DataType::Timestamp(u, tz.clone())
            }
            other => other.clone(),
        });
        let mut second_next = start;
        let second_type = map_leaves(&read_type, &mut second_next, &mut |leaf, dt| match dt {
            DataType::Timestamp(_, tz) if leaf < descr.num_columns() && is_int96(leaf) => {
                DataType::Timestamp(TimeUnit::Second, tz.clone())
            }
            other => other.clone(),
        });
        if (start..next).any(|l| l < descr.num_columns() && is_int96(l)) {
            roots.push(root);
        }
        read_fields.push(fd.as_ref().clone().with_data_type(read_type));
        second_fields.push(fd.as_ref().clone().with_data_type(second_type));
    }
    if next != descr.num_columns() {
        return Err(format!(
            "the Arrow schema has {next} leaf columns and the Parquet schema {}: cannot tell which are INT96",
            descr.num_columns()
        ));
    }
    let with = |fields: Vec<Field>| Schema::new_with_metadata(Fields::from(fields), schema.metadata().clone());
    let read = with(read_fields);
    Ok(Plan { read: (read != *schema).then_some(read), seconds: can_wrap.then(|| with(second_fields)), roots })
}

/// `YYYY-MM-DDTHH:MM:SS` of a count of seconds since 1970 (proleptic Gregorian; the
/// civil-from-days algorithm of Howard Hinnant's date library).
pub fn format_seconds(s: i64) -> String {
    let days = s.div_euclid(86_400);
    let secs = s.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}", secs / 3600, secs % 3600 / 60, secs % 60)
}

/// A value that did not fit: (index in its leaf array, seconds since 1970, unit).
pub struct Wrapped {
    pub index: usize,
    pub top_level: bool,
    pub seconds: i64,
    pub unit: TimeUnit,
}

impl Wrapped {
    pub fn describe(&self) -> String {
        let range = match self.unit {
            TimeUnit::Nanosecond => "the years 1677-2262",
            _ => "about 290,000 years either side of 1970",
        };
        format!(
            "INT96 timestamp {} does not fit a 64-bit timestamp in {} ({range}); read it with \
             coerce_int96_timestamp_unit={}",
            format_seconds(self.seconds),
            unit_name(self.unit),
            if self.unit == TimeUnit::Nanosecond { "'us' (or 'ms', 's')" } else { "'ms' (or 's')" }
        )
    }
}

/// Compare a decoded column with its seconds twin (same rows, INT96 leaves in seconds);
/// the first value whose unit count is not within a second of the seconds, if any.
pub fn first_wrapped(read: &ArrayRef, seconds: &ArrayRef) -> Option<Wrapped> {
    walk(read, seconds, true)
}

fn walk(read: &ArrayRef, seconds: &ArrayRef, top_level: bool) -> Option<Wrapped> {
    match (read.data_type(), seconds.data_type()) {
        (
            DataType::Timestamp(u @ (TimeUnit::Nanosecond | TimeUnit::Microsecond), _),
            DataType::Timestamp(TimeUnit::Second, _),
        ) => {
            let unit = *u;
            let s = seconds.as_any().downcast_ref::<TimestampSecondArray>()?;
            let f = per_second(unit);
            let values: &[i64] = match unit {
                TimeUnit::Nanosecond => read.as_primitive::<arrow_array::types::TimestampNanosecondType>().values(),
                _ => read.as_primitive::<arrow_array::types::TimestampMicrosecondType>().values(),
            };
            (0..values.len().min(s.len())).find_map(|i| {
                let ok = read.is_null(i) || (values[i] as i128 - s.value(i) as i128 * f).abs() < f;
                (!ok).then(|| Wrapped { index: i, top_level, seconds: s.value(i), unit })
            })
        }
        (DataType::Struct(_), DataType::Struct(_)) => {
            let (a, b) = (read.as_struct(), seconds.as_struct());
            a.columns().iter().zip(b.columns()).find_map(|(x, y)| walk(x, y, false))
        }
        (DataType::List(_), DataType::List(_)) => {
            walk(read.as_list::<i32>().values(), seconds.as_list::<i32>().values(), false)
        }
        (DataType::LargeList(_), DataType::LargeList(_)) => {
            walk(read.as_list::<i64>().values(), seconds.as_list::<i64>().values(), false)
        }
        (DataType::FixedSizeList(..), DataType::FixedSizeList(..)) => {
            walk(read.as_fixed_size_list().values(), seconds.as_fixed_size_list().values(), false)
        }
        (DataType::Map(..), DataType::Map(..)) => {
            let (a, b) = (read.as_map(), seconds.as_map());
            a.entries().columns().iter().zip(b.entries().columns()).find_map(|(x, y)| walk(x, y, false))
        }
        (DataType::Dictionary(..), DataType::Dictionary(..)) => {
            walk(read.as_any_dictionary().values(), seconds.as_any_dictionary().values(), false)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_of_seconds() {
        assert_eq!(format_seconds(0), "1970-01-01T00:00:00");
        assert_eq!(format_seconds(253_402_300_799), "9999-12-31T23:59:59");
        assert_eq!(format_seconds(-62_135_596_800), "0001-01-01T00:00:00");
        assert_eq!(format_seconds(10_413_792_000), "2300-01-01T00:00:00");
    }

    #[test]
    fn a_wrapped_nanosecond_value_is_found() {
        use arrow_array::TimestampNanosecondArray;
        let secs: Vec<i64> = vec![946_684_800, 10_413_792_000, 1];
        // what a wrapping conversion gives for 2300-01-01 in ns
        let wrapped = (10_413_792_000i128 * 1_000_000_000) as i64;
        let read: ArrayRef =
            Arc::new(TimestampNanosecondArray::from(vec![946_684_800_000_000_000, wrapped, 1_999_999_999]));
        let sec: ArrayRef = Arc::new(TimestampSecondArray::from(secs));
        let w = first_wrapped(&read, &sec).expect("found");
        assert_eq!(w.index, 1);
        assert!(w.describe().contains("2300-01-01"), "{}", w.describe());
        // within a second of the seconds value: fine (1.999999999 s truncates to 1 s)
        let ok: ArrayRef = Arc::new(TimestampNanosecondArray::from(vec![1_999_999_999i64]));
        let s1: ArrayRef = Arc::new(TimestampSecondArray::from(vec![1i64]));
        assert!(first_wrapped(&ok, &s1).is_none());
        // negative nanos of day truncate towards zero in both units
        let neg: ArrayRef = Arc::new(TimestampNanosecondArray::from(vec![-1_500_000_000i64]));
        let sn: ArrayRef = Arc::new(TimestampSecondArray::from(vec![-1i64]));
        assert!(first_wrapped(&neg, &sn).is_none());
    }
}
