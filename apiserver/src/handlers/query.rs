//! Query parameters read as upstream's parameter codec reads them into `ListOptions`,
//! `DeleteOptions`, `PatchOptions` and the rest (the `[]string` → bool / int64 conversions
//! of apimachinery's `runtime` package): the first of repeated values counts; a boolean is
//! false only when it is `0` or any case of `false` (so Python's `True`, `1` and even an
//! empty value mean true); an integer is Go's `strconv.ParseInt(s, 10, 64)`, and a value that
//! does not parse is refused with 400 and Go's message, not silently read as absent.

use std::collections::HashMap;

use crate::audit::event::go_quote;
use crate::errors::{ApiError, ApiResult};

pub type Query = HashMap<String, String>;

/// The query string's parameters, percent-decoded; the first value of a repeated name.
pub fn parse(query: Option<&str>) -> Query {
    let mut q = Query::new();
    for (k, v) in url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()).into_owned() {
        q.entry(k).or_insert(v);
    }
    q
}

/// A boolean parameter; None when absent.
pub fn bool_param(q: &Query, key: &str) -> Option<bool> {
    q.get(key).map(|v| go_bool(v))
}

/// A present boolean parameter's value (`Convert_Slice_string_To_bool`).
pub fn go_bool(v: &str) -> bool {
    !(v == "0" || v.eq_ignore_ascii_case("false"))
}

/// A boolean parameter that is false when absent.
pub fn flag(q: &Query, key: &str) -> bool {
    bool_param(q, key).unwrap_or(false)
}

/// An integer parameter; None when absent, 400 when it is not a base-10 int64.
pub fn int_param(q: &Query, key: &str) -> ApiResult<Option<i64>> {
    q.get(key).map(|v| go_int(v)).transpose()
}

/// A present integer parameter's value (`strconv.ParseInt(v, 10, 64)`).
pub fn go_int(v: &str) -> ApiResult<i64> {
    v.parse::<i64>().map_err(|e| {
        let why = match e.kind() {
            std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => "value out of range",
            _ => "invalid syntax",
        };
        ApiError::bad_request(format!("strconv.ParseInt: parsing {}: {why}", go_quote(v)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Query {
        parse(Some(s))
    }

    #[test]
    fn booleans_as_upstream_converts_them() {
        for v in ["true", "True", "TRUE", "1", "t", "yes", ""] {
            assert_eq!(bool_param(&q(&format!("watch={v}")), "watch"), Some(true), "{v:?}");
        }
        for v in ["false", "False", "FALSE", "fAlSe", "0"] {
            assert_eq!(bool_param(&q(&format!("watch={v}")), "watch"), Some(false), "{v:?}");
        }
        assert_eq!(bool_param(&q("limit=1"), "watch"), None);
        assert!(!flag(&q(""), "watch"));
    }

    #[test]
    fn integers_refused_with_gos_message() {
        assert_eq!(int_param(&q("limit=500"), "limit").unwrap(), Some(500));
        assert_eq!(int_param(&q("limit=-1"), "limit").unwrap(), Some(-1));
        assert_eq!(int_param(&q("limit=%2B7"), "limit").unwrap(), Some(7));
        assert_eq!(int_param(&q("watch=1"), "limit").unwrap(), None);
        for (v, msg) in [
            ("abc", r#"strconv.ParseInt: parsing "abc": invalid syntax"#),
            ("", r#"strconv.ParseInt: parsing "": invalid syntax"#),
            ("1.5", r#"strconv.ParseInt: parsing "1.5": invalid syntax"#),
            ("%201", r#"strconv.ParseInt: parsing " 1": invalid syntax"#),
            (
                "99999999999999999999",
                r#"strconv.ParseInt: parsing "99999999999999999999": value out of range"#,
            ),
            ("%22", r#"strconv.ParseInt: parsing "\"": invalid syntax"#),
        ] {
            let e = int_param(&q(&format!("limit={v}")), "limit").unwrap_err();
            assert_eq!((e.code, e.reason, e.message.as_str()), (400, "BadRequest", msg), "{v:?}");
        }
    }

    #[test]
    fn the_first_of_repeated_values_counts() {
        assert_eq!(int_param(&q("limit=1&limit=abc"), "limit").unwrap(), Some(1));
    }
}
