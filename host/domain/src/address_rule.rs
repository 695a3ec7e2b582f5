//! Where a cluster may point vigil: the operator's `VIGIL_REGISTRATION_ALLOW`.
//!
//! A caller who may register clusters chooses the URLs vigil's plugins connect to. Without
//! a bound, that caller could make vigil fetch a cloud metadata service (whose answers hold
//! the machine's credentials) or any other internal address. The rule is a list of CIDRs,
//! addresses and host names (`*.example.com` for a domain's subdomains); unset, it allows
//! every address but the ones no cluster lives on: link-local (`169.254.0.0/16`,
//! `fe80::/10`, where clouds serve metadata), the metadata addresses `fd00:ec2::254` and
//! `100.100.100.200`, and the unspecified address (`0.0.0.0/8`, `::`). An IPv4 address
//! written in IPv6 (`::ffff:169.254.169.254`, or NAT64's `64:ff9b::…` for the default
//! denials) is judged as the IPv4 address it reaches.
//!
//! Registration checks the host a URL names ([`AddressRule::check_host`]); the egress
//! checks again every address it is about to connect to ([`AddressRule::allows_address`]),
//! so a name that resolves into a refused range is refused too. Pure: no I/O.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// The setting's name, as errors and messages name it.
pub const SETTING: &str = "VIGIL_REGISTRATION_ALLOW";

/// The addresses and names clusters may point at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddressRule {
    /// `None`: the default (every address but the default denials, every name).
    entries: Option<Vec<Entry>>,
}

/// One entry of the list.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    Net(Net),
    /// A host name, lowercase, without a final dot.
    Name(String),
    /// `*.SUFFIX`: every name ending in `.SUFFIX` (stored with its leading dot).
    Domain(String),
}

/// A CIDR block; IPv4-mapped IPv6 blocks are stored as the IPv4 block they cover.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Net {
    base: IpAddr,
    prefix: u8,
}

impl Net {
    fn new(base: IpAddr, prefix: u8) -> Self {
        match base {
            IpAddr::V6(v6) if prefix >= 96 => match v6.to_ipv4_mapped() {
                Some(v4) => Self {
                    base: IpAddr::V4(v4),
                    prefix: prefix - 96,
                },
                None => Self { base, prefix },
            },
            _ => Self { base, prefix },
        }
    }

    fn contains(&self, ip: IpAddr) -> bool {
        match (self.base, canonical(ip)) {
            (IpAddr::V4(base), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(base) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(base), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(base) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl fmt::Display for Net {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.base, self.prefix)
    }
}

/// An entry of the setting that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("VIGIL_REGISTRATION_ALLOW: the entry `{entry}` is {reason}")]
pub struct BadEntry {
    /// The entry as written.
    pub entry: String,
    /// What is wrong with it.
    pub reason: String,
}

/// Why a host or address is outside the rule: one line, naming the setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outside {
    /// The host as given.
    pub host: String,
    why: &'static str,
}

impl fmt::Display for Outside {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} is outside {SETTING} ({})", self.host, self.why)
    }
}

impl AddressRule {
    /// Reads the setting: entries separated by commas or white space. An empty value is
    /// the default.
    pub fn parse(text: &str) -> Result<Self, BadEntry> {
        let words: Vec<&str> = text
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|w| !w.is_empty())
            .collect();
        if words.is_empty() {
            return Ok(Self::default());
        }
        let entries = words
            .into_iter()
            .map(parse_entry)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            entries: Some(entries),
        })
    }

    /// Whether this is the default rule (the setting unset).
    pub fn is_default(&self) -> bool {
        self.entries.is_none()
    }

    /// Whether a URL may name `host` (as a URL writes it: an IPv6 address in brackets or
    /// not). An address is judged as such, whatever form it is written in (the numeric
    /// shorthands the system resolver reads, like `2852039166`, included); a name is
    /// allowed by the default rule (the addresses it resolves to are checked when vigil
    /// connects), and by a list only when one of its names covers it.
    pub fn check_host(&self, host: &str) -> Result<(), Outside> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let outside = |why| Outside {
            host: host.to_owned(),
            why,
        };
        // A zone (`fe80::1%eth0`) names an interface, not another address.
        let unzoned = bare.split_once('%').map_or(bare, |(address, _)| address);
        if unzoned != bare && literal_address(unzoned).is_none() {
            return Err(outside("not a host name nor an address"));
        }
        if let Some(ip) = literal_address(unzoned) {
            return match self.refusal(None, ip) {
                None => Ok(()),
                Some(why) => Err(outside(why)),
            };
        }
        match &self.entries {
            None => Ok(()),
            Some(_) if self.names_cover(bare) => Ok(()),
            Some(_) => Err(outside("the name is not listed")),
        }
    }

    /// Whether vigil may connect to `ip`, an address `host` resolved to (`host` is the
    /// name the request named, or the address itself). A listed name admits its addresses
    /// except the default denials, which only a listed CIDR or address admits.
    pub fn allows_address(&self, host: &str, ip: IpAddr) -> bool {
        self.refusal(Some(host), ip).is_none()
    }

    /// Why `ip` (reached through the name `host`, if any) is refused, or `None`.
    fn refusal(&self, host: Option<&str>, ip: IpAddr) -> Option<&'static str> {
        let denial = default_denial(ip);
        match &self.entries {
            None => denial,
            Some(entries) => {
                let listed = entries
                    .iter()
                    .any(|entry| matches!(entry, Entry::Net(net) if net.contains(ip)));
                let named = host
                    .is_some_and(|host| literal_address(host).is_none() && self.names_cover(host));
                if listed || (named && denial.is_none()) {
                    None
                } else if named {
                    denial
                } else {
                    Some("the address is not listed")
                }
            }
        }
    }

    fn names_cover(&self, host: &str) -> bool {
        let host = normal_name(host);
        self.entries.iter().flatten().any(|entry| match entry {
            Entry::Name(name) => *name == host,
            Entry::Domain(suffix) => host.len() > suffix.len() && host.ends_with(suffix.as_str()),
            Entry::Net(_) => false,
        })
    }
}

impl FromStr for AddressRule {
    type Err = BadEntry;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

impl fmt::Display for AddressRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(entries) = &self.entries else {
            return f.write_str("every address but link-local, metadata and unspecified ones");
        };
        let words: Vec<String> = entries
            .iter()
            .map(|entry| match entry {
                Entry::Net(net) => net.to_string(),
                Entry::Name(name) => name.clone(),
                Entry::Domain(suffix) => format!("*{suffix}"),
            })
            .collect();
        f.write_str(&words.join(","))
    }
}

fn parse_entry(word: &str) -> Result<Entry, BadEntry> {
    let bad = |reason: &str| BadEntry {
        entry: word.to_owned(),
        reason: reason.to_owned(),
    };
    if let Some((address, prefix)) = word.split_once('/') {
        let address = address.trim_start_matches('[').trim_end_matches(']');
        let base: IpAddr = address
            .parse()
            .map_err(|_| bad("not a CIDR block: the part before / is not an IP address"))?;
        let most = if base.is_ipv4() { 32 } else { 128 };
        let prefix: u8 = prefix
            .parse()
            .ok()
            .filter(|p| *p <= most)
            .ok_or_else(|| bad(&format!("not a CIDR block: the prefix must be 0 to {most}")))?;
        return Ok(Entry::Net(Net::new(base, prefix)));
    }
    let bare = word.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<IpAddr>() {
        let prefix = if ip.is_ipv4() { 32 } else { 128 };
        return Ok(Entry::Net(Net::new(ip, prefix)));
    }
    if literal_address(bare).is_some() {
        return Err(bad(
            "an IPv4 address in a shorthand form: write it as four decimal numbers",
        ));
    }
    let (domain, name) = match word.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, word),
    };
    let name = normal_name(name);
    if !is_host_name(&name) {
        return Err(bad(
            "neither a CIDR block, an IP address nor a host name (`*.example.com` for every name under example.com)",
        ));
    }
    Ok(if domain {
        Entry::Domain(format!(".{name}"))
    } else {
        Entry::Name(name)
    })
}

/// A name lowercase, without the final dot of a fully qualified name.
fn normal_name(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

/// Letters, digits, `-` and `_` in dot-separated labels of 1–63 characters, 253 at most.
fn is_host_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// `ip` with an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) as the IPv4 address it is:
/// a socket connected to one reaches the other.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

/// Why the default rule refuses `ip`, or `None`.
fn default_denial(ip: IpAddr) -> Option<&'static str> {
    match canonical(ip) {
        IpAddr::V4(v4) => v4_denial(v4),
        IpAddr::V6(v6) => {
            if v6.is_unspecified() {
                Some("the unspecified address")
            } else if v6.segments()[0] & 0xffc0 == 0xfe80 {
                Some("a link-local address")
            } else if v6 == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) {
                Some("a cloud metadata address")
            } else {
                // NAT64's well-known prefix carries an IPv4 address a gateway reaches.
                let octets = v6.octets();
                let nat64 = [0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0];
                if octets[..12] == nat64 {
                    v4_denial(Ipv4Addr::new(
                        octets[12], octets[13], octets[14], octets[15],
                    ))
                } else {
                    None
                }
            }
        }
    }
}

fn v4_denial(v4: Ipv4Addr) -> Option<&'static str> {
    if v4.octets()[0] == 0 {
        Some("the unspecified address")
    } else if v4.is_link_local() {
        Some("a link-local address")
    } else if v4 == Ipv4Addr::new(100, 100, 100, 200) {
        Some("a cloud metadata address")
    } else {
        None
    }
}

/// The address a host written in a URL stands for, if it is one: IPv6 (without
/// brackets), dotted IPv4, or a numeric shorthand the system resolver reads as IPv4
/// (`inet_aton`: one to four parts, decimal, octal with a leading 0 or hexadecimal with
/// `0x`, the last part filling the remaining bytes — `2852039166`, `0xa9fea9fe`,
/// `169.254.43518`).
pub fn literal_address(host: &str) -> Option<IpAddr> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Some(ip);
    }
    let parts: Vec<&str> = host.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let numbers = parts
        .iter()
        .map(|part| number(part))
        .collect::<Option<Vec<u64>>>()?;
    let (last, leading) = numbers.split_last()?;
    if leading.iter().any(|n| *n > 255) {
        return None;
    }
    let rest_bits = 8 * (4 - leading.len() as u32);
    if rest_bits < 64 && *last >= 1u64 << rest_bits {
        return None;
    }
    let mut value: u64 = *last;
    for (i, n) in leading.iter().enumerate() {
        value |= n << (24 - 8 * i as u32);
    }
    u32::try_from(value)
        .ok()
        .map(|v| IpAddr::V4(Ipv4Addr::from(v)))
}

/// One part of an `inet_aton` address.
fn number(part: &str) -> Option<u64> {
    if part.is_empty() {
        return None;
    }
    let (digits, radix) =
        if let Some(hex) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
            (hex, 16)
        } else if part.len() > 1 && part.starts_with('0') {
            (&part[1..], 8)
        } else {
            (part, 10)
        };
    if digits.is_empty() {
        // `0x` alone is 0 for inet_aton.
        return (radix == 16).then_some(0);
    }
    if !digits.chars().all(|c| c.is_digit(radix)) || digits.len() > 12 {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(text: &str) -> AddressRule {
        AddressRule::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn entries_are_read_and_bad_ones_named() {
        assert!(rule("").is_default());
        assert!(rule(" , ").is_default());
        assert_eq!(
            rule("10.0.0.0/8, fd00::/8 127.0.0.1,[::1],API.example.com.,*.corp.example")
                .to_string(),
            "10.0.0.0/8,fd00::/8,127.0.0.1/32,::1/128,api.example.com,*.corp.example"
        );
        // An IPv4-mapped block is the IPv4 block.
        assert_eq!(rule("::ffff:10.0.0.0/104").to_string(), "10.0.0.0/8");
        for (text, entry) in [
            ("10.0.0.0/33", "10.0.0.0/33"),
            ("fd00::/129", "fd00::/129"),
            ("10.0.0.0/x", "10.0.0.0/x"),
            ("nope/8", "nope/8"),
            ("127.0.0.1, http://x", "http://x"),
            ("a..b", "a..b"),
            ("-x.example", "-x.example"),
            ("*.", "*."),
            ("ex ample!", "ample!"),
            ("2130706433", "2130706433"),
            ("127.1", "127.1"),
        ] {
            let error = AddressRule::parse(text).expect_err(text);
            assert_eq!(error.entry, entry, "{text}");
            assert!(
                error.to_string().starts_with(&format!(
                    "VIGIL_REGISTRATION_ALLOW: the entry `{entry}` is "
                )),
                "{error}"
            );
        }
    }

    #[test]
    fn ipv4_mapped_addresses_are_judged_as_ipv4() {
        let mapped: IpAddr = "::ffff:169.254.169.254".parse().expect("ip");
        assert_eq!(
            canonical(mapped),
            "169.254.169.254".parse::<IpAddr>().expect("ip")
        );
        let plain: IpAddr = "2001:db8::1".parse().expect("ip");
        assert_eq!(canonical(plain), plain);
        let narrow = rule("127.0.0.1/32");
        assert!(narrow.allows_address("x", "::ffff:127.0.0.1".parse().expect("ip")));
        assert!(!narrow.allows_address("x", "::ffff:127.0.0.2".parse().expect("ip")));
        assert!(narrow.check_host("[::ffff:127.0.0.1]").is_ok());
        assert!(narrow.check_host("[::ffff:7f00:2]").is_err());
    }

    #[test]
    fn the_default_refuses_link_local_metadata_and_unspecified_addresses() {
        let default = AddressRule::default();
        for host in [
            "169.254.169.254",
            "169.254.0.1",
            "[::ffff:169.254.169.254]",
            "[::ffff:a9fe:a9fe]",
            "[64:ff9b::169.254.169.254]",
            "fe80::1",
            "[fe80::1]",
            "[febf::1]",
            "[fd00:ec2::254]",
            "100.100.100.200",
            "[::ffff:100.100.100.200]",
            "0.0.0.0",
            "0.1.2.3",
            "[::]",
            "[::ffff:0.0.0.0]",
            "[fe80::1%25eth0]",
            "fe80::1%eth0",
            // Shorthands the resolver reads as 169.254.169.254.
            "2852039166",
            "0xa9fea9fe",
            "0251.0376.0251.0376",
            "169.254.43518",
        ] {
            let outside = default.check_host(host).expect_err(host);
            assert!(
                outside
                    .to_string()
                    .starts_with(&format!("{host} is outside VIGIL_REGISTRATION_ALLOW (")),
                "{outside}"
            );
        }
        for host in [
            "127.0.0.1",
            "10.0.0.7",
            "169.253.255.255",
            "169.255.0.1",
            "100.100.100.201",
            "[::1]",
            "[fec0::1]",
            "[fd00:ec2::253]",
            "[2001:db8::1]",
            "api.example.com",
            "localhost",
            "1.2.3.4.5",
        ] {
            assert_eq!(default.check_host(host), Ok(()), "{host}");
        }
        assert!(
            !default.allows_address("metadata.example", "169.254.169.254".parse().expect("ip"))
        );
        assert!(default.allows_address("api.example", "10.1.2.3".parse().expect("ip")));
    }

    #[test]
    fn a_list_allows_only_what_it_names() {
        let list = rule("10.0.0.0/8,api.example.com,*.corp.example,169.254.10.0/24");
        assert_eq!(list.check_host("10.1.2.3"), Ok(()));
        assert!(list.check_host("11.0.0.1").is_err());
        assert!(list.check_host("169.254.169.254").is_err());
        assert_eq!(list.check_host("169.254.10.9"), Ok(()), "listed explicitly");
        assert_eq!(list.check_host("API.example.com"), Ok(()));
        assert_eq!(list.check_host("a.b.corp.example"), Ok(()));
        assert!(list.check_host("corp.example").is_err());
        assert!(list.check_host("evil-corp.example").is_err());
        assert!(list.check_host("other.example.com").is_err());
        // Connecting: a listed name admits its addresses but the default denials; a name
        // that is not listed only the listed blocks.
        let ip = |text: &str| text.parse::<IpAddr>().expect("ip");
        assert!(list.allows_address("api.example.com", ip("192.168.1.1")));
        assert!(!list.allows_address("api.example.com", ip("169.254.169.254")));
        assert!(list.allows_address("api.example.com", ip("169.254.10.1")));
        assert!(!list.allows_address("other.example", ip("192.168.1.1")));
        assert!(list.allows_address("other.example", ip("10.9.9.9")));
        assert!(!list.allows_address("192.168.1.1", ip("192.168.1.1")));
        let narrow = rule("127.0.0.1/32");
        assert!(!narrow.allows_address("localhost", ip("127.0.0.2")));
        assert!(narrow.check_host("localhost").is_err());
    }

    #[test]
    fn numeric_shorthands_are_read_as_the_resolver_reads_them() {
        let check = |host: &str, expected: Option<&str>| {
            assert_eq!(
                literal_address(host),
                expected.map(|e| e.parse::<IpAddr>().expect("ip")),
                "{host}"
            );
        };
        check("127.0.0.1", Some("127.0.0.1"));
        check("2130706433", Some("127.0.0.1"));
        check("0x7f000001", Some("127.0.0.1"));
        check("127.1", Some("127.0.0.1"));
        check("127.0.1", Some("127.0.0.1"));
        check("0177.0.0.1", Some("127.0.0.1"));
        check("::1", Some("::1"));
        check("4294967296", None);
        check("256.0.0.1", None);
        check("1.2.3.4.5", None);
        check("1.2.65536", None);
        check("08.0.0.1", None);
        check("example.com", None);
        check("", None);
    }
}
