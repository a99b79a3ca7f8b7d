//! The one backoff policy of weftfs's retry loops: the wait before each new attempt
//! starts at a first delay and doubles after every wait, up to a ceiling. Every loop that
//! tries again (resending a request over a broken connection, waiting for a cross-MDT step,
//! registering with the MGS, fetching from a store, following an event queue) takes its
//! delays from a [`Backoff`], with the bounds that suit it; how long it keeps trying is its
//! own decision (a deadline, a count, or for good).

use std::time::Duration;

/// Exponential backoff between attempts (see the module's documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    first: Duration,
    next: Duration,
    max: Duration,
}

impl Backoff {
    /// Waits of `first`, then twice as long each time, never more than `max`.
    pub const fn new(first: Duration, max: Duration) -> Self {
        Self {
            first,
            next: first,
            max,
        }
    }

    /// The wait before the next attempt, without taking it (for a loop that gives up when
    /// the wait would run past its deadline).
    pub fn peek(&self) -> Duration {
        self.next
    }

    /// Takes the wait before the next attempt; the one after is twice as long.
    pub fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = self.next.saturating_mul(2).min(self.max);
        delay
    }

    /// Sleeps the wait before the next attempt.
    pub async fn wait(&mut self) {
        tokio::time::sleep(self.next_delay()).await;
    }

    /// Starts again from the first delay (after an attempt that worked).
    pub fn reset(&mut self) {
        self.next = self.first;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_ceiling_and_start_again_after_a_reset() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(50), ms(1000));
        let delays: Vec<Duration> = (0..7).map(|_| b.next_delay()).collect();
        assert_eq!(
            delays,
            [50, 100, 200, 400, 800, 1000, 1000].map(ms).to_vec()
        );
        assert_eq!(b.peek(), ms(1000));
        b.reset();
        assert_eq!(b.peek(), ms(50));
        // A ceiling below the first delay is the ceiling from the second wait on.
        let mut odd = Backoff::new(ms(10), ms(5));
        assert_eq!((odd.next_delay(), odd.next_delay()), (ms(10), ms(5)));
        // Long waits do not overflow.
        let mut huge = Backoff::new(Duration::MAX, Duration::MAX);
        assert_eq!(
            (huge.next_delay(), huge.next_delay()),
            (Duration::MAX, Duration::MAX)
        );
    }
}
