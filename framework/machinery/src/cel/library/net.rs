//! kube's IP and CIDR libraries (`library/ip.go`, `library/cidr.go`): `ip(string)`,
//! `isIP`, `ip.isCanonical`, the IP predicates (as Go's `netip.Addr` answers them),
//! `cidr(string)`, `isCIDR`, `containsIP`, `containsCIDR`, `ip()`, `masked()`,
//! `prefixLength()`, and `string()` of both.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use cel::common::types::{STRING_TYPE, Type};
use cel::objects::Opaque;
use cel::{Env, ExecutionError, Value};

use super::{error, global, member, op, opaque_arg, string_arg};

/// The CEL type name of an IP address (kube's `net.IP`).
pub(crate) const IP_TYPE: &str = "net.IP";
/// The CEL type name of a CIDR (kube's `net.CIDR`).
pub(crate) const CIDR_TYPE: &str = "net.CIDR";

pub(super) fn install(env: &mut Env) -> Result<(), cel::DeclarationError> {
    let ip = Type::new_opaque_type(IP_TYPE);
    let cidr = Type::new_opaque_type(CIDR_TYPE);
    global(env, "ip", &[STRING_TYPE], op!(to_ip))?;
    global(env, "isIP", &[STRING_TYPE], op!(is_ip))?;
    global(env, "ip.isCanonical", &[STRING_TYPE], op!(is_canonical))?;
    global(env, "string", &[ip.to_owned()], op!(ip_string))?;
    member(env, "family", &ip, &[], op!(family))?;
    member(env, "isUnspecified", &ip, &[], op!(is_unspecified))?;
    member(env, "isLoopback", &ip, &[], op!(is_loopback))?;
    member(
        env,
        "isLinkLocalMulticast",
        &ip,
        &[],
        op!(is_link_local_multicast),
    )?;
    member(
        env,
        "isLinkLocalUnicast",
        &ip,
        &[],
        op!(is_link_local_unicast),
    )?;
    member(env, "isGlobalUnicast", &ip, &[], op!(is_global_unicast))?;
    global(env, "cidr", &[STRING_TYPE], op!(to_cidr))?;
    global(env, "isCIDR", &[STRING_TYPE], op!(is_cidr))?;
    global(env, "string", &[cidr.to_owned()], op!(cidr_string))?;
    member(env, "containsIP", &cidr, &[ip.to_owned()], op!(contains_ip))?;
    member(env, "containsIP", &cidr, &[STRING_TYPE], op!(contains_ip))?;
    member(
        env,
        "containsCIDR",
        &cidr,
        &[cidr.to_owned()],
        op!(contains_cidr),
    )?;
    member(
        env,
        "containsCIDR",
        &cidr,
        &[STRING_TYPE],
        op!(contains_cidr),
    )?;
    member(env, "ip", &cidr, &[], op!(cidr_ip))?;
    member(env, "masked", &cidr, &[], op!(masked))?;
    member(env, "prefixLength", &cidr, &[], op!(prefix_length))?;
    Ok(())
}

/// An IP address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ip(pub(crate) IpAddr);

impl Opaque for Ip {
    fn runtime_type_name(&self) -> &str {
        IP_TYPE
    }
}

/// A network: an address (host bits kept, as Go's `netip.ParsePrefix` keeps them) and
/// its prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cidr {
    addr: IpAddr,
    bits: u8,
}

impl Opaque for Cidr {
    fn runtime_type_name(&self) -> &str {
        CIDR_TYPE
    }
}

/// Parses an address as kube does (`parseIPAddr`): no zone, no IPv4-mapped IPv6.
fn parse_ip(raw: &str) -> Result<IpAddr, String> {
    if raw.contains('%') {
        return Err(format!("IP address {raw:?} with zone value is not allowed"));
    }
    let addr: IpAddr = raw.parse().map_err(|e| {
        format!("IP Address {raw:?} parse error during conversion from string: {e}")
    })?;
    if let IpAddr::V6(v6) = addr {
        if v6.to_ipv4_mapped().is_some() {
            return Err(format!("IPv4-mapped IPv6 address {raw:?} is not allowed"));
        }
    }
    Ok(addr)
}

fn parse_cidr(raw: &str) -> Result<Cidr, String> {
    let wrap =
        |e: String| format!("network address parse error during conversion from string: {e}");
    let (addr, bits) = raw
        .split_once('/')
        .ok_or_else(|| wrap(format!("netip.ParsePrefix({raw:?}): no '/'")))?;
    if addr.contains('%') {
        return Err(wrap(format!(
            "netip.ParsePrefix({raw:?}): IPv6 zones cannot be present in a prefix"
        )));
    }
    let addr: IpAddr = addr
        .parse()
        .map_err(|e| wrap(format!("netip.ParsePrefix({raw:?}): {e}")))?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let valid_bits = !bits.is_empty()
        && bits.bytes().all(|b| b.is_ascii_digit())
        && !(bits.len() > 1 && bits.starts_with('0'));
    let bits: u8 = match bits.parse() {
        Ok(b) if valid_bits && b <= max => b,
        _ => {
            return Err(wrap(format!(
                "netip.ParsePrefix({raw:?}): bad bits after slash: {bits:?}"
            )));
        }
    };
    if let IpAddr::V6(v6) = addr {
        if v6.to_ipv4_mapped().is_some() {
            return Err(format!("IPv4-mapped IPv6 address {raw:?} is not allowed"));
        }
    }
    Ok(Cidr { addr, bits })
}

fn mask(addr: IpAddr, bits: u8) -> IpAddr {
    match addr {
        IpAddr::V4(v4) => {
            let m = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(v4) & m))
        }
        IpAddr::V6(v6) => {
            let m = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(v6) & m))
        }
    }
}

impl Cidr {
    fn contains(&self, addr: IpAddr) -> bool {
        addr.is_ipv4() == self.addr.is_ipv4() && mask(addr, self.bits) == mask(self.addr, self.bits)
    }
}

fn ip_value(addr: IpAddr) -> Value {
    Value::Opaque(Arc::new(Ip(addr)))
}

fn to_ip(args: &[Value]) -> Result<Value, ExecutionError> {
    let addr = parse_ip(string_arg("ip", args, 0)?).map_err(|e| error("ip", e))?;
    Ok(ip_value(addr))
}

fn is_ip(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(parse_ip(string_arg("isIP", args, 0)?).is_ok()))
}

fn is_canonical(args: &[Value]) -> Result<Value, ExecutionError> {
    let raw = string_arg("ip.isCanonical", args, 0)?;
    let addr = parse_ip(raw).map_err(|e| error("ip.isCanonical", e))?;
    Ok(Value::Bool(addr.to_string() == raw))
}

fn ip_string(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::String(
        opaque_arg::<Ip>("string", args, 0)?.0.to_string().into(),
    ))
}

fn ip_of(function: &str, args: &[Value]) -> Result<IpAddr, ExecutionError> {
    Ok(opaque_arg::<Ip>(function, args, 0)?.0)
}

fn family(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Int(if ip_of("family", args)?.is_ipv4() {
        4
    } else {
        6
    }))
}

fn is_unspecified(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(ip_of("isUnspecified", args)?.is_unspecified()))
}

fn is_loopback(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(ip_of("isLoopback", args)?.is_loopback()))
}

fn link_local_multicast(addr: IpAddr) -> bool {
    match addr {
        IpAddr::V4(v4) => v4.octets()[..3] == [224, 0, 0],
        IpAddr::V6(v6) => v6.octets()[0] == 0xff && v6.octets()[1] & 0x0f == 0x02,
    }
}

fn link_local_unicast(addr: IpAddr) -> bool {
    match addr {
        IpAddr::V4(v4) => v4.octets()[..2] == [169, 254],
        IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 == 0xfe80,
    }
}

fn is_link_local_multicast(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(link_local_multicast(ip_of(
        "isLinkLocalMulticast",
        args,
    )?)))
}

fn is_link_local_unicast(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(link_local_unicast(ip_of(
        "isLinkLocalUnicast",
        args,
    )?)))
}

/// Go's `IsGlobalUnicast`: any unicast address but the unspecified, loopback, link-local
/// and (IPv4) broadcast ones; private ranges count.
fn is_global_unicast(args: &[Value]) -> Result<Value, ExecutionError> {
    let addr = ip_of("isGlobalUnicast", args)?;
    let broadcast = addr == IpAddr::V4(Ipv4Addr::BROADCAST);
    Ok(Value::Bool(
        !addr.is_unspecified()
            && !addr.is_loopback()
            && !addr.is_multicast()
            && !link_local_unicast(addr)
            && !broadcast,
    ))
}

fn cidr_value(cidr: Cidr) -> Value {
    Value::Opaque(Arc::new(cidr))
}

fn to_cidr(args: &[Value]) -> Result<Value, ExecutionError> {
    let cidr = parse_cidr(string_arg("cidr", args, 0)?).map_err(|e| {
        error(
            "cidr",
            format!("network address parse error during conversion from string: {e}"),
        )
    })?;
    Ok(cidr_value(cidr))
}

fn is_cidr(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(
        parse_cidr(string_arg("isCIDR", args, 0)?).is_ok(),
    ))
}

fn cidr_string(args: &[Value]) -> Result<Value, ExecutionError> {
    let cidr = opaque_arg::<Cidr>("string", args, 0)?;
    Ok(Value::String(format!("{}/{}", cidr.addr, cidr.bits).into()))
}

fn contains_ip(args: &[Value]) -> Result<Value, ExecutionError> {
    let cidr = opaque_arg::<Cidr>("containsIP", args, 0)?;
    let addr = match args.get(1) {
        Some(Value::String(s)) => parse_ip(s).map_err(|e| error("containsIP", e))?,
        _ => opaque_arg::<Ip>("containsIP", args, 1)?.0,
    };
    Ok(Value::Bool(cidr.contains(addr)))
}

fn contains_cidr(args: &[Value]) -> Result<Value, ExecutionError> {
    let cidr = opaque_arg::<Cidr>("containsCIDR", args, 0)?;
    let other = match args.get(1) {
        Some(Value::String(s)) => parse_cidr(s).map_err(|e| {
            error(
                "containsCIDR",
                format!("network address parse error during conversion from string: {e}"),
            )
        })?,
        _ => *opaque_arg::<Cidr>("containsCIDR", args, 1)?,
    };
    Ok(Value::Bool(
        cidr.bits <= other.bits && cidr.contains(other.addr),
    ))
}

fn cidr_ip(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(ip_value(opaque_arg::<Cidr>("ip", args, 0)?.addr))
}

fn masked(args: &[Value]) -> Result<Value, ExecutionError> {
    let cidr = opaque_arg::<Cidr>("masked", args, 0)?;
    Ok(cidr_value(Cidr {
        addr: mask(cidr.addr, cidr.bits),
        bits: cidr.bits,
    }))
}

fn prefix_length(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Int(i64::from(
        opaque_arg::<Cidr>("prefixLength", args, 0)?.bits,
    )))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{assert_errors, assert_true};

    /// Cases of kube's `library/ip_test.go`.
    #[test]
    fn kube_ip_cases() {
        assert_true(&[
            "isIP('192.168.0.1')",
            "isIP('2001:db8::68')",
            "!isIP('192.168.0.1.0')",
            "!isIP('192.168.0.01')",
            "!isIP('::ffff:c0a8:1')",
            "!isIP('fe80::1%eth0')",
            "ip('192.168.0.1').family() == 4",
            "ip('2001:db8::68').family() == 6",
            "ip.isCanonical('127.0.0.1')",
            "ip.isCanonical('2001:db8::abcd')",
            "!ip.isCanonical('2001:DB8::ABCD')",
            "!ip.isCanonical('2001:db8:0:0:0:0:0:abcd')",
            "ip('0.0.0.0').isUnspecified()",
            "ip('::').isUnspecified()",
            "!ip('127.0.0.1').isUnspecified()",
            "ip('127.0.0.1').isLoopback()",
            "ip('::1').isLoopback()",
            "!ip('1.2.3.4').isLoopback()",
            "ip('224.0.0.1').isLinkLocalMulticast()",
            "ip('ff02::1').isLinkLocalMulticast()",
            "!ip('224.0.1.1').isLinkLocalMulticast()",
            "ip('169.254.169.254').isLinkLocalUnicast()",
            "ip('fe80::1').isLinkLocalUnicast()",
            "!ip('192.168.0.1').isLinkLocalUnicast()",
            "ip('192.168.0.1').isGlobalUnicast()",
            "ip('2001:db8::68').isGlobalUnicast()",
            "!ip('255.255.255.255').isGlobalUnicast()",
            "!ip('ff00::1').isGlobalUnicast()",
            "string(ip('192.168.0.1')) == '192.168.0.1'",
            "ip('127.0.0.1') == ip('127.0.0.1')",
            "ip('127.0.0.1') != ip('127.0.0.2')",
        ]);
        assert_errors(&[
            (
                "ip('192.168.0.1.0')",
                "parse error during conversion from string",
            ),
            ("ip('::ffff:c0a8:1')", "IPv4-mapped IPv6 address"),
            ("ip('fe80::1%eth0')", "with zone value is not allowed"),
        ]);
    }

    /// Cases of kube's `library/cidr_test.go`.
    #[test]
    fn kube_cidr_cases() {
        assert_true(&[
            "isCIDR('192.168.0.0/24')",
            "isCIDR('2001:db8::/32')",
            "!isCIDR('192.168.0.0/33')",
            "!isCIDR('192.168.0.0')",
            "!isCIDR('::ffff:c0a8:0/120')",
            "cidr('192.168.0.0/24').containsIP(ip('192.168.0.1'))",
            "cidr('192.168.0.0/24').containsIP('192.168.0.1')",
            "!cidr('192.168.0.0/24').containsIP(ip('192.168.1.1'))",
            "!cidr('192.168.0.0/24').containsIP('2001:db8::1')",
            "cidr('2001:db8::/32').containsIP(ip('2001:db8::1'))",
            "cidr('192.168.0.0/24').containsCIDR(cidr('192.168.0.0/25'))",
            "cidr('192.168.0.0/24').containsCIDR('192.168.0.128/25')",
            "!cidr('192.168.0.0/24').containsCIDR(cidr('192.168.0.0/23'))",
            "cidr('192.168.0.0/24').containsCIDR('192.168.0.0/24')",
            "cidr('192.168.0.1/24').ip() == ip('192.168.0.1')",
            "cidr('192.168.0.1/24').masked() == cidr('192.168.0.0/24')",
            "cidr('192.168.0.0/24').masked() == cidr('192.168.0.0/24')",
            "cidr('2001:db8::1/32').masked() == cidr('2001:db8::/32')",
            "cidr('192.168.0.0/24').prefixLength() == 24",
            "string(cidr('192.168.0.0/24')) == '192.168.0.0/24'",
            "string(cidr('2001:db8::/32')) == '2001:db8::/32'",
        ]);
        assert_errors(&[
            ("cidr('192.168.0.0/33')", "network address parse error"),
            ("cidr('::ffff:c0a8:0/120')", "IPv4-mapped IPv6 address"),
        ]);
    }
}
