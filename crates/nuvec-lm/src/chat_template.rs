//! Rendering chat templates as `transformers`' `apply_chat_template(…, tokenize=False)` does:
//! minijinja with blocks trimmed, Python's string methods, and the functions and filters
//! `transformers` adds to its Jinja environment (`raise_exception`, `strftime_now`, and a
//! `tojson` that writes what Python's `json.dumps` writes, not Jinja's HTML-safe JSON).

use crate::{Error, Result};
use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::ErrorKind;
use std::fmt::Write;

/// Renders `template` with `context` (name and value pairs, in order).
pub(crate) fn render(template: &str, context: Vec<(&str, Value)>) -> Result<String> {
    let mut env = minijinja::Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    minijinja_contrib::add_to_environment(&mut env);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function(
        "raise_exception",
        |message: String| -> std::result::Result<String, minijinja::Error> {
            Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
        },
    );
    env.add_function("strftime_now", strftime_now);
    env.add_filter("tojson", tojson);
    env.add_template("chat", template)
        .map_err(|e| Error::Template(format!("cannot parse the template: {e:#}")))?;
    let context = Value::from_iter(context.into_iter().map(|(k, v)| (k.to_string(), v)));
    env.get_template("chat")
        .and_then(|t| t.render(context))
        .map_err(|e| Error::Template(format!("cannot render: {e:#}")))
}

fn invalid(message: String) -> minijinja::Error {
    minijinja::Error::new(ErrorKind::InvalidOperation, message)
}

/// `transformers`' `tojson(x, ensure_ascii=False, indent=None, separators=None,
/// sort_keys=False)`: Python's `json.dumps` with those arguments, positional or named.
fn tojson(
    value: Value,
    args: minijinja::value::Rest<Value>,
    kwargs: Kwargs,
) -> std::result::Result<String, minijinja::Error> {
    let names = ["ensure_ascii", "indent", "separators", "sort_keys"];
    if args.len() > names.len() {
        return Err(invalid(format!(
            "tojson takes at most {} arguments, got {}",
            names.len(),
            args.len()
        )));
    }
    let mut given: Vec<Option<Value>> = vec![None; names.len()];
    for (slot, value) in given.iter_mut().zip(args.iter()) {
        *slot = Some(value.clone());
    }
    for (slot, name) in given.iter_mut().zip(names) {
        if let Some(value) = kwargs.get::<Option<Value>>(name)? {
            if slot.is_some() {
                return Err(invalid(format!("tojson got {name} twice")));
            }
            *slot = Some(value);
        }
    }
    kwargs.assert_all_used()?;
    let present = |v: &Option<Value>| v.clone().filter(|v| !v.is_none() && !v.is_undefined());
    let ensure_ascii = present(&given[0]).is_some_and(|v| v.is_true());
    let indent = match present(&given[1]) {
        None => None,
        Some(v) if v.kind() == ValueKind::String => Some(v.as_str().unwrap_or("").to_string()),
        Some(v) => {
            let n = i64::try_from(v.clone())
                .map_err(|_| invalid(format!("tojson: indent must be a number, got {v}")))?;
            Some(" ".repeat(n.max(0) as usize))
        }
    };
    let (item, key) = match present(&given[2]) {
        Some(pair) => {
            let parts: Vec<Value> = pair
                .try_iter()
                .map_err(|_| invalid("tojson: separators must be a pair of strings".into()))?
                .collect();
            match parts.as_slice() {
                [a, b] if a.as_str().is_some() && b.as_str().is_some() => (
                    a.as_str().unwrap_or_default().to_string(),
                    b.as_str().unwrap_or_default().to_string(),
                ),
                _ => {
                    return Err(invalid(
                        "tojson: separators must be a pair of strings".into(),
                    ))
                }
            }
        }
        // Python's defaults: no space before a newline when indenting.
        None if indent.is_some() => (",".into(), ": ".into()),
        None => (", ".into(), ": ".into()),
    };
    let style = Style {
        ensure_ascii,
        indent,
        item,
        key,
        sort_keys: present(&given[3]).is_some_and(|v| v.is_true()),
    };
    let mut out = String::new();
    style.write(&mut out, &value, 0)?;
    Ok(out)
}

/// How `json.dumps` was asked to write.
struct Style {
    ensure_ascii: bool,
    indent: Option<String>,
    item: String,
    key: String,
    sort_keys: bool,
}

impl Style {
    fn newline(&self, out: &mut String, depth: usize) {
        if let Some(indent) = &self.indent {
            out.push('\n');
            for _ in 0..depth {
                out.push_str(indent);
            }
        }
    }

    fn write(
        &self,
        out: &mut String,
        value: &Value,
        depth: usize,
    ) -> std::result::Result<(), minijinja::Error> {
        match value.kind() {
            ValueKind::None => out.push_str("null"),
            ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
            ValueKind::Number => match i128::try_from(value.clone()) {
                Ok(n) if value.is_integer() => {
                    let _ = write!(out, "{n}");
                }
                _ => {
                    let f = f64::try_from(value.clone())
                        .map_err(|_| invalid(format!("tojson: {value} is not a number")))?;
                    out.push_str(&python_float(f));
                }
            },
            ValueKind::String => self.string(out, value.as_str().unwrap_or_default()),
            ValueKind::Seq | ValueKind::Iterable => {
                let items: Vec<Value> = value.try_iter()?.collect();
                if items.is_empty() {
                    out.push_str("[]");
                    return Ok(());
                }
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(&self.item);
                    }
                    self.newline(out, depth + 1);
                    self.write(out, item, depth + 1)?;
                }
                self.newline(out, depth);
                out.push(']');
            }
            ValueKind::Map => {
                let mut keys: Vec<Value> = value.try_iter()?.collect();
                if keys.is_empty() {
                    out.push_str("{}");
                    return Ok(());
                }
                if self.sort_keys {
                    keys.sort();
                }
                out.push('{');
                for (i, key) in keys.iter().enumerate() {
                    if i > 0 {
                        out.push_str(&self.item);
                    }
                    self.newline(out, depth + 1);
                    match key.as_str() {
                        Some(text) => self.string(out, text),
                        // json.dumps writes number, boolean and null keys as strings.
                        None => self.string(out, &key_text(key)?),
                    }
                    out.push_str(&self.key);
                    self.write(out, &value.get_item(key)?, depth + 1)?;
                }
                self.newline(out, depth);
                out.push('}');
            }
            _ => {
                return Err(invalid(format!(
                    "tojson: an undefined value or a {} is not JSON serializable",
                    value.kind()
                )))
            }
        }
        Ok(())
    }

    /// A string as `json.dumps` quotes it.
    fn string(&self, out: &mut String, text: &str) {
        out.push('"');
        for c in text.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                c if (c as u32) < 0x20 || (self.ensure_ascii && (c as u32) > 0x7e) => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        let _ = write!(out, "\\u{unit:04x}");
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
}

/// A non-string map key as `json.dumps` writes it.
fn key_text(key: &Value) -> std::result::Result<String, minijinja::Error> {
    match key.kind() {
        ValueKind::None => Ok("null".into()),
        ValueKind::Bool => Ok(if key.is_true() { "true" } else { "false" }.into()),
        ValueKind::Number if key.is_integer() => Ok(key.to_string()),
        ValueKind::Number => Ok(python_float(f64::try_from(key.clone())?)),
        _ => Err(invalid(format!(
            "tojson: a {} key is not allowed",
            key.kind()
        ))),
    }
}

/// A float as Python's `repr` (and so `json.dumps`) writes it: the shortest digits that read
/// back the same, positional from 1e-4 up to 1e16, else with a signed two-digit exponent.
fn python_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    let scientific = format!("{f:e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if f == 0.0 || (-4..16).contains(&exponent) {
        let plain = format!("{f}");
        if plain.contains('.') {
            plain
        } else {
            plain + ".0"
        }
    } else {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exponent.abs())
    }
}

/// `transformers`' `strftime_now(format)`: the current time, formatted as C's `strftime`
/// for the common directives, in UTC (Python uses the machine's zone, which on servers is
/// usually UTC).
fn strftime_now(format: String) -> std::result::Result<String, minijinja::Error> {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    strftime(&format, seconds)
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// `format` for the UTC time `seconds` after the Unix epoch.
fn strftime(format: &str, seconds: i64) -> std::result::Result<String, minijinja::Error> {
    let days = seconds.div_euclid(86_400);
    let of_day = seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let weekday = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday.
    let day_of_year = days - days_from_civil(year, 1, 1) + 1;
    let (hour, minute, second) = (of_day / 3600, of_day / 60 % 60, of_day % 60);
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let directive = chars
            .next()
            .ok_or_else(|| invalid("strftime_now: the format ends with a lone %".into()))?;
        let month_name = MONTHS[(month - 1) as usize];
        let _ = match directive {
            'Y' => write!(out, "{year}"),
            'y' => write!(out, "{:02}", year.rem_euclid(100)),
            'm' => write!(out, "{month:02}"),
            'd' => write!(out, "{day:02}"),
            'e' => write!(out, "{day:>2}"),
            'B' => write!(out, "{month_name}"),
            'b' | 'h' => write!(out, "{}", &month_name[..3]),
            'A' => write!(out, "{}", DAYS[weekday]),
            'a' => write!(out, "{}", &DAYS[weekday][..3]),
            'j' => write!(out, "{day_of_year:03}"),
            'H' => write!(out, "{hour:02}"),
            'I' => write!(out, "{:02}", (hour + 11) % 12 + 1),
            'p' => write!(out, "{}", if hour < 12 { "AM" } else { "PM" }),
            'M' => write!(out, "{minute:02}"),
            'S' => write!(out, "{second:02}"),
            'F' => write!(out, "{year}-{month:02}-{day:02}"),
            'T' => write!(out, "{hour:02}:{minute:02}:{second:02}"),
            '%' => write!(out, "%"),
            other => {
                return Err(invalid(format!(
                    "strftime_now: the directive %{other} is not supported (supported: %Y %y %m %d %e %B %b %h %A %a %j %H %I %p %M %S %F %T %%)"
                )))
            }
        };
    }
    Ok(out)
}

/// The proleptic Gregorian date of a count of days since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests;
