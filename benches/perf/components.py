"""Self time of `perf report --no-children --sort dso,sym -g none --stdio`, by component.

Usage: python3 benches/perf/components.py FLAT_REPORT  (`make profile` runs it). Each symbol goes
to the first component whose rule matches it; what none matches is "other", its largest listed.
"""
import re,sys,collections
rules=[
 ("kernel (syscalls, TCP on loopback, scheduling)", lambda d,s: d.startswith("[kernel") or d=="[vdso]"),
 ("allocator (glibc malloc/free)", lambda d,s: d.startswith("libc") and re.search(r"malloc|free|_int_|unlink_chunk|realloc|calloc|tcache",s)),
 ("memcpy/memcmp/memset", lambda d,s: re.search(r"mem(move|cpy|cmp|set|chr)|strlen|__memcmp",s)),
 ("libc other (epoll, clock, write)", lambda d,s: d.startswith("libc") or d.startswith("ld-") or d.startswith("libgcc")),
 ("SigV4 signing (aws_sigv4, sha2, hmac)", lambda d,s: re.search(r"aws_sigv4|sha2::|hmac|aws_runtime::auth",s)),
 ("TLS (rustls, aws-lc)", lambda d,s: re.search(r"rustls|aws_lc|fiat_|^aws_lc|bn_|ec_|x25519|mlkem|aes_|gcm|chacha|poly1305|sha256_block|sha512_block|CRYPTO|EVP_|OPENSSL",s)),
 ("AWS SDK runtime (smithy orchestrator, config bag, interceptors, serde)", lambda d,s: re.search(r"aws_smithy|aws_sdk_|aws_types|aws_credential|aws_runtime|aws_config",s)),
 ("HTTP (hyper, http, httparse)", lambda d,s: re.search(r"hyper|^http::|<http::|httparse|h2::",s)),
 ("tokio, futures, mio", lambda d,s: re.search(r"tokio|futures|mio::|parking_lot",s)),
 ("logging (tracing, JSON formatting, fmt)", lambda d,s: re.search(r"tracing|core::fmt|alloc::fmt|serde_json::ser|format_escaped|std::io::Write|LineWriter|Stdout",s)),
 ("lambda_runtime (Runtime API client, event decoding)", lambda d,s: re.search(r"lambda_runtime|aws_lambda_events",s)),
 ("JSON decoding (serde_json de)", lambda d,s: re.search(r"serde_json::de|serde_json::read|serde_core::de|serde::de|skip_to_escape|deserialize",s)),
 ("cfn-once (decode, decide, build)", lambda d,s: re.search(r"cfn_once",s)),
 ("core/alloc/std (utf8, Vec growth, hashing)", lambda d,s: re.search(r"core::|alloc::|std::|hashbrown|<alloc|<core|<std",s)),
]
tot=collections.Counter(); other=collections.Counter()
for line in open(sys.argv[1]):
    m=re.match(r"\s*([\d.]+)%\s+(\S+)\s+\[(.)\]\s+(.*)",line)
    if not m: continue
    p=float(m.group(1)); d=m.group(2); s=m.group(4)
    for name,f in rules:
        if f(d,s): tot[name]+=p; break
    else:
        tot["other"]+=p; other[s[:90]]+=p
for k,v in tot.most_common(): print(f"{v:6.2f}%  {k}")
print("-- top other:")
for k,v in other.most_common(8): print(f"{v:5.2f}% {k}")
