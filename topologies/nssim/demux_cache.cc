// A cache in front of ns-3's endpoint demultiplexer, which the twin's receiver needs at scale.
//
// ns-3's Ipv4EndPointDemux::Lookup walks every endpoint of a node for every packet it delivers: with
// 2000 flows on one receiver that walk was about a third of perf's profile (1 Gb/s,
// 2000 flows). This file defines Lookup and DeAllocate in the executable, so the
// dynamic linker binds ns-3's own calls to them (the wheel's libraries reach both through their
// PLT; `objdump -d` of libns3.44-internet.so shows it), and hands every miss to ns-3's own code.
//
// Why the answer is ns-3's own: only an endpoint that matches a packet on all four of local
// address, local port, peer address and peer port is cached, and a cached endpoint is checked
// again on every hit (still receiving, same four values, bound to no device or to the incoming
// one). ns-3 returns such an endpoint alone whenever one exists (an exact match is its most
// specific class, and two of them abort the simulation), so a checked hit returns what the walk
// would. DeAllocate forgets an endpoint before ns-3 frees it. `--fast-paths 0` turns the cache off
// (every lookup is ns-3's walk); tests/test_sim_twin.py checks both give the same simulation.
#include "ns3/internet-module.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <unordered_map>

namespace ns3
{
namespace
{

bool g_cacheOn = true;

struct Key
{
    uint32_t daddr, saddr;
    uint16_t dport, sport;
    const Ipv4EndPointDemux* demux;

    bool operator==(const Key& o) const
    {
        return daddr == o.daddr && saddr == o.saddr && dport == o.dport && sport == o.sport && demux == o.demux;
    }
};

struct KeyHash
{
    size_t operator()(const Key& k) const
    {
        uint64_t a = (static_cast<uint64_t>(k.daddr) << 32) | k.saddr;
        uint64_t b = (static_cast<uint64_t>(k.dport) << 16) | k.sport;
        return std::hash<uint64_t>()(a * 0x9E3779B97F4A7C15ULL ^ b) ^ std::hash<const void*>()(k.demux);
    }
};

std::unordered_map<Key, Ipv4EndPoint*, KeyHash> g_byTuple;
std::unordered_map<const Ipv4EndPoint*, Key> g_byEndpoint;

// ns-3's own definitions, behind the ones below.
using LookupFn = Ipv4EndPointDemux::EndPoints (*)(Ipv4EndPointDemux*, Ipv4Address, uint16_t, Ipv4Address,
                                                   uint16_t, Ptr<Ipv4Interface>);
using DeAllocateFn = void (*)(Ipv4EndPointDemux*, Ipv4EndPoint*);

template <typename Fn>
Fn Next(const char* symbol)
{
    void* f = dlsym(RTLD_NEXT, symbol);
    if (f == nullptr)
    {
        std::fprintf(stderr, "bsz-nssim: ns-3's %s is not in its library\n", symbol);
        std::abort();
    }
    return reinterpret_cast<Fn>(f);
}

// The mangled names of the two members (ns-3 3.44; the Makefile builds against that wheel only).
LookupFn g_lookup =
    Next<LookupFn>("_ZN3ns317Ipv4EndPointDemux6LookupB5cxx11ENS_11Ipv4AddressEtS1_tNS_3PtrINS_13Ipv4InterfaceEEE");
DeAllocateFn g_deallocate = Next<DeAllocateFn>("_ZN3ns317Ipv4EndPointDemux10DeAllocateEPNS_12Ipv4EndPointE");

bool Exact(const Ipv4EndPoint* e, const Key& k, const Ptr<Ipv4Interface>& in)
{
    if (!e->IsRxEnabled() || e->GetLocalPort() != k.dport || e->GetPeerPort() != k.sport ||
        e->GetLocalAddress().Get() != k.daddr || e->GetPeerAddress().Get() != k.saddr)
        return false;
    Ptr<NetDevice> bound = e->GetBoundNetDevice();
    return !bound || bound == in->GetDevice();
}

void Forget(const Ipv4EndPoint* e)
{
    auto it = g_byEndpoint.find(e);
    if (it == g_byEndpoint.end())
        return;
    g_byTuple.erase(it->second);
    g_byEndpoint.erase(it);
}

} // namespace

void BszSetDemuxCache(bool on)
{
    g_cacheOn = on;
}

Ipv4EndPointDemux::EndPoints
Ipv4EndPointDemux::Lookup(Ipv4Address daddr,
                          uint16_t dport,
                          Ipv4Address saddr,
                          uint16_t sport,
                          Ptr<Ipv4Interface> incomingInterface)
{
    if (!g_cacheOn)
        return g_lookup(this, daddr, dport, saddr, sport, incomingInterface);
    Key k{daddr.Get(), saddr.Get(), dport, sport, this};
    auto hit = g_byTuple.find(k);
    if (hit != g_byTuple.end())
    {
        if (Exact(hit->second, k, incomingInterface))
            return EndPoints{hit->second};
        Forget(hit->second);
    }
    EndPoints found = g_lookup(this, daddr, dport, saddr, sport, incomingInterface);
    if (found.size() == 1 && Exact(found.front(), k, incomingInterface))
    {
        Forget(found.front()); // an endpoint is cached under one tuple, its latest
        g_byTuple[k] = found.front();
        g_byEndpoint[found.front()] = k;
    }
    return found;
}

void
Ipv4EndPointDemux::DeAllocate(Ipv4EndPoint* endPoint)
{
    Forget(endPoint);
    g_deallocate(this, endPoint);
}

} // namespace ns3
