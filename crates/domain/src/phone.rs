//! Phone numbers in E.164 form (`+4915123456789`), parsed and validated with the `phonenumber`
//! crate (Google's libphonenumber metadata).
//!
//! Accepted inputs, after trimming:
//! * `+` and the country code: `+49 151 2345 6789`, `+1 (415) 555-2671`;
//! * the international prefix `00` instead of `+`: `0049 151 23456789`;
//! * digits only, read as a number *with* its country code, as WhatsApp's `wa_id` is:
//!   `4915123456789`.
//!
//! Spaces, `-`, `.`, `(` and `)` are allowed as separators. Letters, other characters, numbers
//! that are too short or too long, and numbers the metadata does not consider valid are
//! refused. The input is length-bounded before the parser sees it.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The longest raw input looked at (separators included).
pub const MAX_INPUT_LEN: usize = 32;
/// E.164 allows at most 15 digits, country code included.
const MAX_DIGITS: usize = 15;
/// The shortest number we accept, country code included.
const MIN_DIGITS: usize = 7;

/// A valid phone number in E.164 form.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Phone(String);

/// Why a text is not a phone number we accept (a sentence for people).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PhoneError {
    #[error("is empty")]
    Empty,
    #[error("is longer than {MAX_INPUT_LEN} characters")]
    TooLongInput,
    #[error("contains letters; give the number in international form, e.g. +4915123456789")]
    Letters,
    #[error(
        "contains characters other than digits, '+', spaces, '-', '.', '(' and ')'; give the number in international form, e.g. +4915123456789"
    )]
    BadCharacters,
    #[error("is too short to be a phone number with its country code")]
    TooShort,
    #[error("is too long: E.164 numbers have at most 15 digits")]
    TooLong,
    #[error("does not start with a valid country code")]
    InvalidCountryCode,
    #[error("is not a valid phone number")]
    Invalid,
}

impl Phone {
    /// Parses and normalizes a phone number (see the module documentation).
    pub fn parse(input: &str) -> Result<Phone, PhoneError> {
        if input.len() > MAX_INPUT_LEN * 4 {
            return Err(PhoneError::TooLongInput);
        }
        let s = input.trim();
        if s.is_empty() {
            return Err(PhoneError::Empty);
        }
        if s.chars().count() > MAX_INPUT_LEN {
            return Err(PhoneError::TooLongInput);
        }
        if s.chars().any(char::is_alphabetic) {
            return Err(PhoneError::Letters);
        }
        let mut digits = String::with_capacity(16);
        for (i, c) in s.char_indices() {
            match c {
                '0'..='9' => digits.push(c),
                '+' if i == 0 => {}
                ' ' | '-' | '.' | '(' | ')' => {}
                _ => return Err(PhoneError::BadCharacters),
            }
        }
        // `00` is the international prefix: the country code follows.
        let international = if s.starts_with('+') {
            digits
        } else if let Some(rest) = digits.strip_prefix("00") {
            rest.to_owned()
        } else {
            digits
        };
        if international.len() < MIN_DIGITS {
            return Err(PhoneError::TooShort);
        }
        if international.len() > MAX_DIGITS {
            return Err(PhoneError::TooLong);
        }
        if international.starts_with('0') {
            return Err(PhoneError::InvalidCountryCode);
        }
        let parsed = phonenumber::parse(None, format!("+{international}")).map_err(|e| {
            use phonenumber::ParseError as P;
            match e {
                P::InvalidCountryCode => PhoneError::InvalidCountryCode,
                P::TooShortAfterIdd | P::TooShortNsn | P::NoNumber => PhoneError::TooShort,
                P::TooLong => PhoneError::TooLong,
                _ => PhoneError::Invalid,
            }
        })?;
        if !phonenumber::is_valid(&parsed) {
            return Err(PhoneError::Invalid);
        }
        let e164 = parsed.format().mode(phonenumber::Mode::E164).to_string();
        debug_assert!(e164.starts_with('+'));
        Ok(Phone(e164))
    }

    /// A number a provider asserts (WhatsApp's `wa_id`: digits with country code). It is
    /// parsed like any input; when the metadata does not (yet) know the number but it has the
    /// shape of one (7 to 15 digits, no leading 0), it is kept as `+digits` rather than losing
    /// the customer's message.
    pub fn from_provider_id(id: &str) -> Option<Phone> {
        if let Ok(p) = Phone::parse(id) {
            return Some(p);
        }
        let digits = id.trim().trim_start_matches('+');
        let shaped = (MIN_DIGITS..=MAX_DIGITS).contains(&digits.len())
            && digits.bytes().all(|b| b.is_ascii_digit())
            && !digits.starts_with('0');
        shaped.then(|| Phone(format!("+{digits}")))
    }

    /// Loads the phone-number metadata database (about 55 ms and 5 MB in a release build, much
    /// longer in debug builds), so that the first request that parses a number does not pay for
    /// it. The patterns of a country are compiled when a number of that country is first parsed
    /// (2 to 8 ms, 1 to 2 MB each): compiling a few countries' here too held 6 MB more from
    /// start-up on, for countries a deployment may never send to.
    pub fn warm_up() {
        let _ = &*phonenumber::metadata::DATABASE;
    }

    /// The E.164 form, with `+`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The digits without `+` (WhatsApp's `to` and `wa_id` form).
    pub fn digits(&self) -> &str {
        self.0.trim_start_matches('+')
    }

    /// A value read back from storage, where it was written in E.164 form.
    pub fn from_stored(s: String) -> Phone {
        Phone(s)
    }
}

impl fmt::Display for Phone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for Phone {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

/// A phone read back (a stored record): validated again.
impl<'de> Deserialize<'de> for Phone {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Phone::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_international_forms() {
        for input in [
            "+4915123456789",
            "+49 151 2345 6789",
            "  +49-151-2345-6789 ",
            "004915123456789",
            "0049 151 23456789",
            "4915123456789",
            "+49 (151) 2345.6789",
        ] {
            assert_eq!(
                Phone::parse(input).unwrap().as_str(),
                "+4915123456789",
                "{input}"
            );
        }
        let us = Phone::parse("+1 (415) 555-2671").unwrap();
        assert_eq!(us.as_str(), "+14155552671");
        assert_eq!(us.digits(), "14155552671");
        assert_eq!(
            Phone::parse("5511987654321").unwrap().as_str(),
            "+5511987654321"
        );
    }

    #[test]
    fn refuses_what_is_not_a_number() {
        assert_eq!(Phone::parse(""), Err(PhoneError::Empty));
        assert_eq!(Phone::parse("   "), Err(PhoneError::Empty));
        assert_eq!(Phone::parse("+49 151 CALL ME"), Err(PhoneError::Letters));
        assert_eq!(Phone::parse("tel:+4915123456789"), Err(PhoneError::Letters));
        assert_eq!(Phone::parse("+49#151"), Err(PhoneError::BadCharacters));
        assert_eq!(
            Phone::parse("49+15123456789"),
            Err(PhoneError::BadCharacters)
        );
        assert_eq!(Phone::parse("+49151"), Err(PhoneError::TooShort));
        assert_eq!(Phone::parse("12"), Err(PhoneError::TooShort));
        assert_eq!(
            Phone::parse("+4915123456789012345"),
            Err(PhoneError::TooLong)
        );
        assert_eq!(Phone::parse(&"1".repeat(40)), Err(PhoneError::TooLongInput));
        assert_eq!(
            Phone::parse(&"9".repeat(100_000)),
            Err(PhoneError::TooLongInput)
        );
        // A national number without country code (German mobile with trunk 0) is refused.
        assert!(Phone::parse("015123456789").is_err());
        // A country code that does not exist.
        assert!(Phone::parse("+999 123 456 789").is_err());
        // Right length, but not a valid number in its country.
        assert_eq!(Phone::parse("+1 000 000 0000"), Err(PhoneError::Invalid));
        assert!(Phone::parse("+١٢٣٤٥٦٧٨٩٠").is_err(), "non-ASCII digits");
    }

    #[test]
    fn provider_ids_are_kept_when_shaped_like_numbers() {
        assert_eq!(
            Phone::from_provider_id("4915123456789").unwrap().as_str(),
            "+4915123456789"
        );
        assert_eq!(
            Phone::from_provider_id("10000000000").unwrap().as_str(),
            "+10000000000"
        );
        assert_eq!(Phone::from_provider_id("0123456789"), None);
        assert_eq!(Phone::from_provider_id("abc"), None);
        assert_eq!(Phone::from_provider_id("123"), None);
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        proptest! {
            /// Any input is parsed or refused without panicking; what parses is E.164.
            #[test]
            fn any_input_parses_to_e164_or_is_refused(s in ".{0,64}") {
                if let Ok(p) = Phone::parse(&s) {
                    let e164 = p.as_str();
                    prop_assert!(e164.starts_with('+'));
                    prop_assert!(e164[1..].chars().all(|c| c.is_ascii_digit()));
                    prop_assert!((8..=16).contains(&e164.len()), "{}", e164);
                    prop_assert_eq!(p.digits(), &e164[1..]);
                    // Normal form is a fixed point.
                    prop_assert_eq!(Phone::parse(e164).unwrap(), p);
                }
            }

            /// The spellings people type (spaces, dashes, dots, parentheses, `00` for `+`)
            /// give the same number as the plain form.
            #[test]
            fn spellings_give_the_same_number(national in "[1-9][0-9]{9}", seps in prop::collection::vec(prop::sample::select(vec!["", " ", "-", ".", " "]), 10)) {
                let plain = format!("+49{national}");
                let Ok(expected) = Phone::parse(&plain) else { return Ok(()); };
                let mut spaced = String::from("+49 ");
                for (d, sep) in national.chars().zip(&seps) {
                    spaced.push(d);
                    spaced.push_str(sep);
                }
                let spaced = spaced.trim_end_matches([' ', '-', '.']).to_owned();
                prop_assert_eq!(Phone::parse(&spaced), Ok(expected.clone()), "{}", spaced);
                prop_assert_eq!(Phone::parse(&format!("0049{national}")), Ok(expected.clone()));
                prop_assert_eq!(Phone::parse(&format!("+49 ({}) {}", &national[..3], &national[3..])), Ok(expected));
            }

            /// Letters and other symbols are refused wherever they appear.
            #[test]
            fn letters_and_symbols_are_refused(digits in "[0-9]{8,12}", at in any::<prop::sample::Index>(), bad in "[a-zA-Z#*/,;:!?]") {
                let mut s = format!("+49{digits}");
                let i = 1 + at.index(s.len() - 1);
                s.insert_str(i, &bad);
                prop_assert!(Phone::parse(&s).is_err(), "{}", s);
            }
        }
    }
}
