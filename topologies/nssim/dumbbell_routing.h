// Routes of the twin's dumbbell, looked up in a hash table instead of ns-3's lists.
//
// ns-3's static and global routing scan a node's routes for every packet; the router has one
// connected route per sender host (400 in the presets), and every sender a global route per host,
// so at scale each packet paid two scans of hundreds of entries. This protocol, asked first on
// every node, knows each destination the dumbbell has (a sender host's address, the receiver's)
// and the interface toward it: the same interface, source address and next hop as ns-3's routing
// computes for this topology, so routing answers are unchanged. A destination it does not know
// falls through to ns-3's static and global routing below it, as before.
#pragma once

#include "ns3/internet-module.h"

#include <unordered_map>

namespace bsz
{

class DumbbellRouting : public ns3::Ipv4RoutingProtocol
{
  public:
    static ns3::TypeId GetTypeId()
    {
        static ns3::TypeId tid = ns3::TypeId("bsz::DumbbellRouting")
                                     .SetParent<ns3::Ipv4RoutingProtocol>()
                                     .SetGroupName("Internet")
                                     .AddConstructor<DumbbellRouting>();
        return tid;
    }

    // Packets to `dest` leave by `interface`, toward the neighbour `gateway` at its other end.
    void Add(ns3::Ipv4Address dest, uint32_t interface, ns3::Ipv4Address gateway)
    {
        m_routes[dest.Get()] = Route{interface, gateway};
    }

    ns3::Ptr<ns3::Ipv4Route> RouteOutput(ns3::Ptr<ns3::Packet>,
                                         const ns3::Ipv4Header& header,
                                         ns3::Ptr<ns3::NetDevice> oif,
                                         ns3::Socket::SocketErrno& sockerr) override
    {
        ns3::Ptr<ns3::Ipv4Route> r = Lookup(header.GetDestination());
        if (r && oif && r->GetOutputDevice() != oif)
            r = nullptr; // bound to another device: ns-3's routing decides
        if (r)
            sockerr = ns3::Socket::ERROR_NOTERROR;
        return r;
    }

    bool RouteInput(ns3::Ptr<const ns3::Packet> p,
                    const ns3::Ipv4Header& header,
                    ns3::Ptr<const ns3::NetDevice>,
                    const UnicastForwardCallback& ucb,
                    const MulticastForwardCallback&,
                    const LocalDeliverCallback&,
                    const ErrorCallback&) override
    {
        // Local delivery and the forwarding check are Ipv4ListRouting's, before it asks us.
        ns3::Ptr<ns3::Ipv4Route> r = Lookup(header.GetDestination());
        if (!r)
            return false;
        ucb(r, p, header);
        return true;
    }

    void NotifyInterfaceUp(uint32_t) override {}
    void NotifyInterfaceDown(uint32_t) override {}
    void NotifyAddAddress(uint32_t, ns3::Ipv4InterfaceAddress) override {}
    void NotifyRemoveAddress(uint32_t, ns3::Ipv4InterfaceAddress) override {}

    void SetIpv4(ns3::Ptr<ns3::Ipv4> ipv4) override
    {
        m_ipv4 = ipv4;
    }

    void PrintRoutingTable(ns3::Ptr<ns3::OutputStreamWrapper> stream, ns3::Time::Unit) const override
    {
        for (const auto& [dest, r] : m_routes)
            *stream->GetStream() << ns3::Ipv4Address(dest) << " if " << r.interface << " via " << r.gateway << "\n";
    }

  private:
    struct Route
    {
        uint32_t interface;
        ns3::Ipv4Address gateway;
    };

    std::unordered_map<uint32_t, Route> m_routes;
    ns3::Ptr<ns3::Ipv4> m_ipv4;

    ns3::Ptr<ns3::Ipv4Route> Lookup(ns3::Ipv4Address dest) const
    {
        auto it = m_routes.find(dest.Get());
        if (it == m_routes.end() || !m_ipv4->IsUp(it->second.interface))
            return nullptr;
        ns3::Ptr<ns3::Ipv4Route> r = ns3::Create<ns3::Ipv4Route>();
        r->SetDestination(dest);
        r->SetSource(m_ipv4->GetAddress(it->second.interface, 0).GetLocal());
        r->SetGateway(it->second.gateway);
        r->SetOutputDevice(m_ipv4->GetNetDevice(it->second.interface));
        return r;
    }
};

} // namespace bsz
