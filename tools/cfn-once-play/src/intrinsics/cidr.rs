//! `Fn::Cidr`'s arithmetic: `count` address blocks of `cidr_bits` host bits each, in order from
//! the start of `ip_block`, as the User Guide defines it
//! (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/intrinsic-function-reference-cidr.html:
//! "count: the number of CIDRs to generate. Valid range is between 1 and 256"; "cidrBits: the
//! number of subnet bits for the CIDR. For example, specifying a value "8" for this parameter will
//! create a CIDR with a mask of "/24""; IPv4 subtracts from 32, IPv6 from 128).
//!
//! The Guide does not say what happens when the blocks do not fit in `ip_block`, or when
//! `ip_block` has host bits set; play refuses the first (naming how many fit) and starts from
//! the block's network address in the second.

use std::net::{Ipv4Addr, Ipv6Addr};

/// The blocks, as text (`10.0.0.0/24`, `2001:db8::/64`), or why there are none.
pub(crate) fn cidr(ip_block: &str, count: &str, cidr_bits: &str) -> Result<Vec<String>, String> {
    let count: u32 = count
        .trim()
        .parse()
        .ok()
        .filter(|count| (1..=256).contains(count))
        .ok_or_else(|| format!("Fn::Cidr's count {count:?} is not a whole number from 1 to 256"))?;
    let cidr_bits: u32 =
        cidr_bits.trim().parse().map_err(|_| format!("Fn::Cidr's cidrBits {cidr_bits:?} is not a whole number"))?;
    let (address, prefix) = ip_block
        .split_once('/')
        .ok_or_else(|| format!("Fn::Cidr's ipBlock {ip_block:?} is not a CIDR block (address/prefix)"))?;
    let prefix: u32 =
        prefix.parse().map_err(|_| format!("Fn::Cidr's ipBlock {ip_block:?} has no whole-number prefix"))?;
    let (start, width, six) = if let Ok(v4) = address.parse::<Ipv4Addr>() {
        (u128::from(u32::from(v4)), 32, false)
    } else if let Ok(v6) = address.parse::<Ipv6Addr>() {
        (u128::from(v6), 128, true)
    } else {
        return Err(format!("Fn::Cidr's ipBlock {ip_block:?} is not an IPv4 or IPv6 address"));
    };
    if prefix > width {
        return Err(format!("Fn::Cidr's ipBlock {ip_block:?} has a prefix longer than {width} bits"));
    }
    if cidr_bits > width - prefix {
        return Err(format!(
            "Fn::Cidr's cidrBits {cidr_bits} is more than the {} host bits of {ip_block}",
            width - prefix
        ));
    }
    let mask = width - cidr_bits;
    // How many blocks of `cidr_bits` host bits fit in the block: 2^(mask - prefix), capped so that
    // the shift stays in range (more than 256 always fits `count`).
    let fitting = if mask - prefix >= 9 { 512 } else { 1u128 << (mask - prefix) };
    if u128::from(count) > fitting {
        return Err(format!("Fn::Cidr: {ip_block} holds {fitting} blocks of /{mask}, fewer than the count {count}"));
    }
    let host_mask = if width - prefix == 128 { u128::MAX } else { (1u128 << (width - prefix)) - 1 };
    let network = start & !host_mask;
    let step = if cidr_bits == 128 { 0 } else { 1u128 << cidr_bits };
    let blocks = (0..u128::from(count))
        .map(|index| {
            let first = network + index * step;
            if six {
                format!("{}/{mask}", Ipv6Addr::from(first))
            } else {
                // An IPv4 block stays within 32 bits: `first` is inside `ip_block`.
                format!("{}/{mask}", Ipv4Addr::from(first as u32))
            }
        })
        .collect();
    Ok(blocks)
}
