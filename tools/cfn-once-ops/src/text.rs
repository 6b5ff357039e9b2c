//! Text from outside (a provider's reason, a stack's id) made safe to print.

/// `text` made safe to print on a terminal: control characters (newlines, escape sequences, the
/// bell) and the Unicode controls that reorder or hide text are written as `\u{..}` escapes,
/// and at most `chars_max` characters are kept, ending in "…" when cut.
pub fn terminal_safe(text: &str, chars_max: usize) -> String {
    let mut safe = String::with_capacity(text.len().min(chars_max));
    for (count, c) in text.chars().enumerate() {
        if count == chars_max {
            safe.push('…');
            break;
        }
        let invisible =
            matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}');
        if c.is_control() || invisible {
            safe.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            safe.push(c);
        }
    }
    safe
}
