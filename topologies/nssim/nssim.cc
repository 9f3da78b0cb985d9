// bsz-nssim: the toolkit's dumbbell as a packet-level ns-3 simulation, driven line by line on stdin.
//
// The emulated search changes the bottleneck's bfifo limit in place while its flows keep running and
// reads bytes from interface counters; this program offers the same two operations on simulated
// time, so the Python search (buffersizing/sim/) runs unchanged on top:
//   buffer <packets>   set the drop-tail FIFO's limit (packets already queued stay, as with bfifo)
//   run <seconds>      advance the simulation; prints one JSON line with what the interval saw
//   status             prints the simulated time and how many flows have delivered data
//   quit
// Topology: H sender hosts, each on its own access link (rate A, one-way delay RTT_h / 2) to a router,
// whose port toward the one receiver is the bottleneck: rate C, no propagation delay, and a FIFO of
// B packets with no queueing discipline in front of it (ns-3 would add a 1000-packet pfifo_fast).
// TCP is set as close to Linux as ns-3 allows: SACK, timestamps, window scaling, initial window 10,
// delayed ACKs every 2 segments or 40 ms, PRR, and an RTO of srtt + max(4 rttvar, 200 ms) (ns-3's
// clock granularity term is exactly Linux's rto_min term; its default 1 s minimum RTO starves flows).
#include "ns3/applications-module.h"
#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

#include <cstdio>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace ns3;

namespace
{

const uint32_t kPpp = 2;  // point-to-point header
const uint32_t kEth = 14; // Ethernet header

// A drop-tail FIFO whose limit can fall below its backlog (the base class refuses such a limit),
// counting what the search needs: drops, their times, and the time-weighted backlog.
class BszFifo : public Queue<Packet>
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("bsz::Fifo")
                                .SetParent<Queue<Packet>>()
                                .SetGroupName("Network")
                                .AddConstructor<BszFifo>();
        return tid;
    }

    BszFifo()
    {
        SetMaxSize(QueueSize(QueueSizeUnit::PACKETS, 1u << 30));
    }

    uint32_t limit = 100;
    uint64_t drops = 0;
    std::vector<double> dropTimes; // seconds, since the last report
    double area = 0;               // packet-seconds since the last report
    uint32_t maxLen = 0;

    bool Enqueue(Ptr<Packet> p) override
    {
        Account();
        if (GetNPackets() >= limit)
        {
            drops++;
            dropTimes.push_back(Simulator::Now().GetSeconds());
            DropBeforeEnqueue(p);
            return false;
        }
        bool ok = DoEnqueue(GetContainer().end(), p);
        maxLen = std::max(maxLen, GetNPackets());
        return ok;
    }

    Ptr<Packet> Dequeue() override
    {
        Account();
        return DoDequeue(GetContainer().begin());
    }

    Ptr<Packet> Remove() override
    {
        Account();
        return DoRemove(GetContainer().begin());
    }

    Ptr<const Packet> Peek() const override
    {
        return DoPeek(GetContainer().begin());
    }

    struct Stats
    {
        double area;
        uint32_t maxLen;
        std::vector<double> dropTimes;
    };

    // What the queue saw since the last call, which starts the next period.
    Stats Take()
    {
        Account();
        Stats s{area, maxLen, std::move(dropTimes)};
        area = 0;
        maxLen = GetNPackets();
        dropTimes.clear();
        return s;
    }

  private:
    double last = 0;

    void Account()
    {
        double now = Simulator::Now().GetSeconds();
        area += GetNPackets() * (now - last);
        last = now;
    }
};

struct Options
{
    uint32_t flows = 1;
    uint32_t hosts = 1;
    double rateMbps = 10;
    double accessMbps = 1000;
    std::vector<double> rttMs{20};
    std::string cc = "reno";
    uint32_t bufferPackets = 100;
    uint32_t seed = 1;
    double startSpreadS = 1.0;
};

[[noreturn]] void Usage(const std::string& why)
{
    std::cerr << "bsz-nssim: " << why << "\n"
              << "usage: bsz-nssim --flows N --hosts H --rate-mbps C --rtt-ms R[,R...] --cc reno|cubic|bbr "
                 "--buffer-packets B [--access-mbps A] [--seed S] [--start-spread-s T]\n";
    std::exit(2);
}

double Number(const std::string& flag, const std::string& text, double lo, double hi)
{
    char* end = nullptr;
    double v = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !(v >= lo && v <= hi))
    {
        Usage(flag + " " + text + ": not a number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    return v;
}

Options Parse(int argc, char** argv)
{
    Options o;
    for (int i = 1; i < argc; i += 2)
    {
        std::string flag = argv[i];
        if (i + 1 >= argc)
        {
            Usage(flag + " needs a value");
        }
        std::string v = argv[i + 1];
        if (flag == "--flows")
            o.flows = Number(flag, v, 1, 100000);
        else if (flag == "--hosts")
            o.hosts = Number(flag, v, 1, 10000);
        else if (flag == "--rate-mbps")
            o.rateMbps = Number(flag, v, 0.01, 1e6);
        else if (flag == "--access-mbps")
            o.accessMbps = Number(flag, v, 0.01, 1e6);
        else if (flag == "--buffer-packets")
            o.bufferPackets = Number(flag, v, 1, 1e8);
        else if (flag == "--seed")
            o.seed = Number(flag, v, 1, 4e9);
        else if (flag == "--start-spread-s")
            o.startSpreadS = Number(flag, v, 0, 100);
        else if (flag == "--cc")
        {
            if (v != "reno" && v != "cubic" && v != "bbr")
                Usage("--cc " + v + ": the twin has reno, cubic and bbr");
            o.cc = v;
        }
        else if (flag == "--rtt-ms")
        {
            o.rttMs.clear();
            std::stringstream ss(v);
            std::string part;
            while (std::getline(ss, part, ','))
                o.rttMs.push_back(Number(flag, part, 0, 1e5));
        }
        else
            Usage("unknown option " + flag);
    }
    if (o.hosts > o.flows)
        Usage("more hosts than flows");
    if (o.rttMs.size() != 1 && o.rttMs.size() != o.hosts)
        Usage("--rtt-ms: one RTT, or one per host");
    return o;
}

} // namespace

int main(int argc, char** argv)
{
    Options o = Parse(argc, argv);
    RngSeedManager::SetSeed(o.seed);
    RngSeedManager::SetRun(1);

    const std::map<std::string, std::string> ccType{
        {"reno", "ns3::TcpLinuxReno"}, {"cubic", "ns3::TcpCubic"}, {"bbr", "ns3::TcpBbr"}};
    Config::SetDefault("ns3::TcpL4Protocol::SocketType", StringValue(ccType.at(o.cc)));
    // 1448 bytes of payload: a 1500-byte IP packet with the timestamp option, as Linux sends.
    Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(1448));
    Config::SetDefault("ns3::TcpSocket::InitialCwnd", UintegerValue(10));
    Config::SetDefault("ns3::TcpSocket::DelAckCount", UintegerValue(2));
    // A lost SYN is sent again after 1 s, as Linux does (ns-3's default waits 3 s).
    Config::SetDefault("ns3::TcpSocket::ConnTimeout", TimeValue(Seconds(1)));
    Config::SetDefault("ns3::TcpSocket::DelAckTimeout", TimeValue(MilliSeconds(40)));
    // Buffers far above any window here (Linux autotunes up to 4-6 MB): the window, not the
    // socket, must limit a flow.
    Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(64u << 20));
    Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(64u << 20));
    Config::SetDefault("ns3::TcpSocketBase::Sack", BooleanValue(true));
    Config::SetDefault("ns3::TcpSocketBase::Timestamp", BooleanValue(true));
    Config::SetDefault("ns3::TcpSocketBase::WindowScaling", BooleanValue(true));
    Config::SetDefault("ns3::TcpSocketBase::MinRto", TimeValue(MilliSeconds(200)));
    Config::SetDefault("ns3::TcpSocketBase::ClockGranularity", TimeValue(MilliSeconds(200)));
    Config::SetDefault("ns3::TcpL4Protocol::RecoveryType", TypeIdValue(TypeId::LookupByName("ns3::TcpPrrRecovery")));
    // Linux paces only BBR without fq; ns-3's BBR needs pacing on.
    Config::SetDefault("ns3::TcpSocketState::EnablePacing", BooleanValue(o.cc == "bbr"));

    NodeContainer senders;
    senders.Create(o.hosts);
    Ptr<Node> router = CreateObject<Node>();
    Ptr<Node> receiver = CreateObject<Node>();
    InternetStackHelper stack;
    stack.Install(senders);
    stack.Install(router);
    stack.Install(receiver);

    Ipv4AddressHelper addr;
    addr.SetBase("10.0.0.0", "255.255.255.252");
    PointToPointHelper access;
    access.SetDeviceAttribute("DataRate", DataRateValue(DataRate(o.accessMbps * 1e6)));
    // A host's own queue toward the router: large, like a host qdisc, so no loss happens there.
    access.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", QueueSizeValue(QueueSize("10000p")));
    for (uint32_t h = 0; h < o.hosts; h++)
    {
        double rtt = o.rttMs.size() == 1 ? o.rttMs[0] : o.rttMs[h];
        access.SetChannelAttribute("Delay", TimeValue(MicroSeconds(static_cast<int64_t>(rtt * 500))));
        NetDeviceContainer d = access.Install(senders.Get(h), router);
        addr.Assign(d);
        addr.NewNetwork();
    }

    PointToPointHelper bottleneck;
    // --rate-mbps counts Ethernet frames (1514 bytes for 1500 of IP), as the emulation's interface
    // counters do; a point-to-point frame is 1502, so the device runs slower by that ratio to send
    // the same packets a second, and the byte count below is of the frames Ethernet would carry.
    bottleneck.SetDeviceAttribute("DataRate",
                                  DataRateValue(DataRate(o.rateMbps * 1e6 * (1500.0 + kPpp) / (1500.0 + kEth))));
    bottleneck.SetChannelAttribute("Delay", TimeValue(Seconds(0)));
    NetDeviceContainer bd = bottleneck.Install(router, receiver);
    Ipv4InterfaceContainer bi = addr.Assign(bd);
    // The FIFO is the bottleneck's only queue: no queueing discipline in front of the device.
    TrafficControlHelper().Uninstall(bd.Get(0));
    Ptr<BszFifo> fifo = CreateObject<BszFifo>();
    fifo->limit = o.bufferPackets;
    Ptr<PointToPointNetDevice> port = DynamicCast<PointToPointNetDevice>(bd.Get(0));
    port->SetQueue(fifo);
    Ipv4GlobalRoutingHelper::PopulateRoutingTables();

    uint64_t txBytes = 0, txPackets = 0;
    port->TraceConnectWithoutContext("PhyTxEnd", Callback<void, Ptr<const Packet>>([&](Ptr<const Packet> p) {
                                         txBytes += p->GetSize() - kPpp + kEth;
                                         txPackets++;
                                     }));

    // One sink; a flow counts as up once its first bytes arrive.
    const uint16_t port_ = 5001;
    PacketSinkHelper sinkHelper("ns3::TcpSocketFactory", InetSocketAddress(Ipv4Address::GetAny(), port_));
    ApplicationContainer sinkApp = sinkHelper.Install(receiver);
    std::set<std::string> upFlows;
    Ptr<PacketSink> sink = DynamicCast<PacketSink>(sinkApp.Get(0));
    sink->TraceConnectWithoutContext(
        "RxWithAddresses",
        Callback<void, Ptr<const Packet>, const Address&, const Address&>([&](Ptr<const Packet>, const Address& from, const Address&) {
            std::ostringstream key;
            InetSocketAddress a = InetSocketAddress::ConvertFrom(from);
            key << a.GetIpv4() << ":" << a.GetPort();
            upFlows.insert(key.str());
        }));
    sinkApp.Start(Seconds(0));

    Ptr<UniformRandomVariable> start = CreateObject<UniformRandomVariable>();
    for (uint32_t f = 0; f < o.flows; f++)
    {
        BulkSendHelper bulk("ns3::TcpSocketFactory", InetSocketAddress(bi.GetAddress(1), port_));
        bulk.SetAttribute("MaxBytes", UintegerValue(0));
        bulk.SetAttribute("SendSize", UintegerValue(64 * 1448));
        ApplicationContainer app = bulk.Install(senders.Get(f % o.hosts));
        app.Start(Seconds(start->GetValue(0, o.startSpreadS)));
    }

    std::string line;
    std::cout << std::fixed;
    std::cout.precision(6);
    std::cout << "{\"ready\": true, \"flows\": " << o.flows << "}" << std::endl;
    while (std::getline(std::cin, line))
    {
        std::istringstream in(line);
        std::string cmd;
        in >> cmd;
        if (cmd == "quit")
            break;
        if (cmd == "buffer")
        {
            double b = -1;
            in >> b;
            if (!(b >= 1 && b <= 1e8))
            {
                std::cout << "{\"error\": \"buffer: a packet count >= 1\"}" << std::endl;
                continue;
            }
            fifo->limit = static_cast<uint32_t>(b);
            std::cout << "{\"buffer\": " << fifo->limit << "}" << std::endl;
        }
        else if (cmd == "run")
        {
            double t = -1;
            in >> t;
            if (!(t > 0 && t <= 1e5))
            {
                std::cout << "{\"error\": \"run: seconds > 0\"}" << std::endl;
                continue;
            }
            uint64_t bytes0 = txBytes, packets0 = txPackets, drops0 = fifo->drops;
            double t0 = Simulator::Now().GetSeconds();
            fifo->Take();
            Simulator::Stop(Seconds(t));
            Simulator::Run();
            double t1 = Simulator::Now().GetSeconds();
            BszFifo::Stats q = fifo->Take();
            std::cout << "{\"t0\": " << t0 << ", \"t1\": " << t1 << ", \"bytes\": " << txBytes - bytes0
                      << ", \"packets\": " << txPackets - packets0 << ", \"drops\": " << fifo->drops - drops0
                      << ", \"flows_up\": " << upFlows.size() << ", \"queue_mean\": " << q.area / (t1 - t0)
                      << ", \"queue_max\": " << q.maxLen << ", \"drop_times\": [";
            // One time per millisecond that saw a drop: enough for loss episodes (bins of 2 RTTs).
            long lastMs = -1;
            bool first = true;
            for (double d : q.dropTimes)
            {
                long ms = static_cast<long>(d * 1000);
                if (ms == lastMs)
                    continue;
                lastMs = ms;
                std::cout << (first ? "" : ", ") << ms / 1000.0;
                first = false;
            }
            std::cout << "]}" << std::endl;
        }
        else if (cmd == "status")
        {
            std::cout << "{\"t\": " << Simulator::Now().GetSeconds() << ", \"flows_up\": " << upFlows.size() << "}"
                      << std::endl;
        }
        else
        {
            std::cout << "{\"error\": \"unknown command\"}" << std::endl;
        }
    }
    Simulator::Destroy();
    return 0;
}
