//! A request's generated text as it grows: ended by a stop text (which is not part of it),
//! and released to a stream only where no stop text could still begin.

/// The text of one request.
#[derive(Debug)]
pub(crate) struct Text {
    stops: Vec<String>,
    /// Everything generated so far (up to a stop text, once one is found).
    text: String,
    /// Bytes of `text` already released.
    released: usize,
    stopped: bool,
}

impl Text {
    pub(crate) fn new(stops: Vec<String>) -> Text {
        Text {
            stops,
            text: String::new(),
            released: 0,
            stopped: false,
        }
    }

    /// Adds a piece of text; returns whether a stop text now ends the generation.
    pub(crate) fn push(&mut self, piece: &str) -> bool {
        if self.stopped {
            return true;
        }
        // A stop text may start up to its length minus one before the new piece.
        let longest = self.stops.iter().map(String::len).max().unwrap_or(0);
        let mut from = self.text.len().saturating_sub(longest.saturating_sub(1));
        while !self.text.is_char_boundary(from) {
            from -= 1;
        }
        self.text.push_str(piece);
        let first = (self.stops.iter())
            .filter_map(|stop| self.text[from..].find(stop.as_str()).map(|at| from + at))
            .min();
        if let Some(at) = first {
            self.text.truncate(at);
            self.released = self.released.min(at);
            self.stopped = true;
        }
        self.stopped
    }

    /// Text that no stop text can take back any more, not released before; with `all`,
    /// everything left (the generation ended).
    pub(crate) fn release(&mut self, all: bool) -> String {
        let mut end = if all || self.stopped {
            self.text.len()
        } else {
            let longest = self.stops.iter().map(String::len).max().unwrap_or(0);
            // The longest tail of the text that begins some stop text is held back.
            let held = (1..longest.min(self.text.len() + 1))
                .rev()
                .find(|&n| {
                    let tail_start = self.text.len() - n;
                    self.text.is_char_boundary(tail_start)
                        && (self.stops.iter()).any(|s| s.starts_with(&self.text[tail_start..]))
                })
                .unwrap_or(0);
            self.text.len() - held
        };
        end = end.max(self.released);
        let out = self.text[self.released..end].to_string();
        self.released = end;
        out
    }

    /// The whole text.
    #[cfg(test)]
    pub(crate) fn all(&self) -> &str {
        &self.text
    }
}

#[cfg(test)]
mod tests {
    use super::Text;

    #[test]
    fn a_stop_text_split_over_pieces_ends_the_text_before_it() {
        let mut text = Text::new(vec!["END".into()]);
        assert!(!text.push("hello E"));
        assert_eq!(text.release(false), "hello ");
        assert!(!text.push("N"));
        assert_eq!(text.release(false), "");
        assert!(text.push("D and more"));
        assert_eq!(text.release(false), "");
        assert_eq!(text.all(), "hello ");
    }

    #[test]
    fn held_back_text_that_is_not_a_stop_is_released() {
        let mut text = Text::new(vec!["END".into()]);
        text.push("abE");
        assert_eq!(text.release(false), "ab");
        text.push("x");
        assert_eq!(text.release(false), "Ex");
        text.push("EN");
        assert_eq!(text.release(true), "EN");
    }

    #[test]
    fn the_earliest_of_several_stops_wins() {
        let mut text = Text::new(vec!["zz".into(), "b".into()]);
        assert!(text.push("a zz b"));
        assert_eq!(text.all(), "a ");
        let mut plain = Text::new(Vec::new());
        assert!(!plain.push("é"));
        assert_eq!(plain.release(false), "é");
    }
}
