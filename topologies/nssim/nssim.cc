// bsz-nssim: the toolkit's dumbbell as a packet-level ns-3 simulation, driven line by line on stdin.
//
// The emulated search changes the bottleneck's bfifo limit in place while its flows keep running and
// reads bytes from interface counters; this program offers the same two operations on simulated
// time, so the Python search (buffersizing/sim/) runs unchanged on top:
//   buffer <packets>   set the drop-tail FIFO's limit (packets already queued stay, as with bfifo)
//   run <seconds>      advance the simulation; prints one JSON line with what the interval saw
//   status             prints the simulated time and how many flows have delivered data
//   transfer <t> <host> <bytes>
//                      a short transfer (open loop): at simulated time t, host opens a new TCP
//                      connection to the receiver, sends the bytes and closes
//   user <host> <until> <think> <bytes> [<think> <bytes> ...]
//                      a closed-loop user: thinks, transfers, and on completion thinks again, in
//                      the order given; starts nothing after simulated time `until`
//   arrivals <seconds> advance the simulation; prints its start and end (t0, t1) and the time of
//                      every packet offered to the bottleneck's FIFO (queued or dropped) in between
//   transfers          prints every short transfer: host, bytes, start and completion time (-1: not
//                      completed), in the order they started
//   quit
// Topology: H sender hosts, each on its own access link (rate A, one-way delay RTT_h / 2) to a router,
// whose port toward the one receiver is the bottleneck: rate C, no propagation delay, and a FIFO of
// B packets with no queueing discipline in front of it (ns-3 would add a 1000-packet pfifo_fast).
// TCP is set as close to Linux as ns-3 allows: SACK, timestamps, window scaling, initial window 10,
// delayed ACKs every 2 segments or 40 ms (--delack 1: every segment at once), PRR, and an RTO of
// srtt + max(4 rttvar, 200 ms) (ns-3's clock granularity term is exactly Linux's rto_min term; its
// default 1 s minimum RTO starves flows). Unpaced, as Linux sends without fq, except BBR; --pacing 1
// paces every flow as Linux does when asked (1.2 x cwnd / srtt, 2 x in slow start: ns-3's defaults
// too), capped at the access rate.
#include "ns3/applications-module.h"
#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

#include "dumbbell_routing.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <deque>
#include <functional>
#include <map>
#include <unordered_map>
#include <unordered_set>
#include <sstream>
#include <string>
#include <vector>

using namespace ns3;

namespace ns3
{
void BszSetDemuxCache(bool on); // demux_cache.cc
}

namespace
{

struct TcpCounts
{
    uint64_t segs = 0, retrans = 0, timeouts = 0, recoveries = 0;
};

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
    bool recordArrivals = false;
    std::vector<double> arrivals; // every packet offered to the queue while recording (seconds)

    bool Enqueue(Ptr<Packet> p) override
    {
        Account();
        if (recordArrivals)
            arrivals.push_back(Simulator::Now().GetSeconds());
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
    uint32_t iw = 10;
    std::string rto = "linux";
    uint32_t delack = 2; // segments a delayed ACK waits for (1: every segment ACKed at once)
    uint32_t pacing = 0; // 1: every flow paced by its TCP (the emulation's --sender-pacing on)
    uint32_t fastPaths = 1; // 0: ns-3's own routing, local-address check and demultiplexing
    // NAME=VALUE defaults of ns-3 attributes set after the Linux-like ones, so an experiment can turn
    // one part of a congestion control off (ns3::TcpCubic::HyStart=false) without a build of its own.
    std::vector<std::string> attributes;
};

[[noreturn]] void Usage(const std::string& why)
{
    std::cerr << "bsz-nssim: " << why << "\n"
              << "usage: bsz-nssim --flows N --hosts H --rate-mbps C --rtt-ms R[,R...] --cc reno|cubic|bbr "
                 "--buffer-packets B [--access-mbps A] [--seed S] [--start-spread-s T] [--iw PACKETS] [--rto linux|ns2] [--delack 1|2] [--pacing 0|1] [--fast-paths 0|1] [--attribute ns3::TYPE::NAME=VALUE ...]\n"
                 "(--flows 0: short transfers only, given on stdin)\n";
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

// Every option: how its value is read into Options (a number is refused outside its range).
using SetOption = std::function<void(Options&, const std::string& flag, const std::string& value)>;

SetOption Whole(uint32_t Options::*field, double lo, double hi)
{
    return [=](Options& o, const std::string& f, const std::string& v) { o.*field = Number(f, v, lo, hi); };
}

SetOption Real(double Options::*field, double lo, double hi)
{
    return [=](Options& o, const std::string& f, const std::string& v) { o.*field = Number(f, v, lo, hi); };
}

SetOption OneOf(std::string Options::*field, std::vector<std::string> allowed, std::string what)
{
    return [=](Options& o, const std::string& f, const std::string& v) {
        if (std::find(allowed.begin(), allowed.end(), v) == allowed.end())
            Usage(f + " " + v + ": " + what);
        o.*field = v;
    };
}

const std::map<std::string, SetOption> kOptions{
    {"--flows", Whole(&Options::flows, 0, 100000)},
    {"--hosts", Whole(&Options::hosts, 1, 10000)},
    {"--rate-mbps", Real(&Options::rateMbps, 0.01, 1e6)},
    {"--access-mbps", Real(&Options::accessMbps, 0.01, 1e6)},
    {"--buffer-packets", Whole(&Options::bufferPackets, 1, 1e8)},
    {"--seed", Whole(&Options::seed, 1, 4e9)},
    {"--start-spread-s", Real(&Options::startSpreadS, 0, 100)},
    {"--iw", Whole(&Options::iw, 1, 1000)},
    {"--delack", Whole(&Options::delack, 1, 2)},
    {"--pacing", Whole(&Options::pacing, 0, 1)},
    {"--fast-paths", Whole(&Options::fastPaths, 0, 1)},
    {"--rto", OneOf(&Options::rto, {"linux", "ns2"}, "linux or ns2")},
    {"--cc", OneOf(&Options::cc, {"reno", "cubic", "bbr"}, "the twin has reno, cubic and bbr")},
    {"--attribute", [](Options& o, const std::string&, const std::string& v) { o.attributes.push_back(v); }},
    {"--rtt-ms",
     [](Options& o, const std::string& f, const std::string& v) {
         o.rttMs.clear();
         std::stringstream ss(v);
         std::string part;
         while (std::getline(ss, part, ','))
             o.rttMs.push_back(Number(f, part, 0, 1e5));
     }},
};

Options Parse(int argc, char** argv)
{
    Options o;
    for (int i = 1; i < argc; i += 2)
    {
        std::string flag = argv[i];
        if (i + 1 >= argc)
            Usage(flag + " needs a value");
        auto it = kOptions.find(flag);
        if (it == kOptions.end())
            Usage("unknown option " + flag);
        it->second(o, flag, argv[i + 1]);
    }
    if (o.flows > 0 && o.hosts > o.flows)
        Usage("more hosts than flows");
    if (o.rttMs.size() != 1 && o.rttMs.size() != o.hosts)
        Usage("--rtt-ms: one RTT, or one per host");
    return o;
}

// TCP as close to Linux as ns-3 allows (the header comment lists what and why).
void SetTcpDefaults(const Options& o)
{
    const std::map<std::string, std::string> ccType{
        {"reno", "ns3::TcpLinuxReno"}, {"cubic", "ns3::TcpCubic"}, {"bbr", "ns3::TcpBbr"}};
    Config::SetDefault("ns3::TcpL4Protocol::SocketType", StringValue(ccType.at(o.cc)));
    // 1448 bytes of payload: a 1500-byte IP packet with the timestamp option, as Linux sends.
    Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(1448));
    Config::SetDefault("ns3::TcpSocket::InitialCwnd", UintegerValue(o.iw));
    Config::SetDefault("ns3::TcpSocket::DelAckCount", UintegerValue(o.delack));
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
    // linux: RTO = srtt + max(4 rttvar, 200 ms), at least 200 ms. ns2: ns-2's defaults since 2004,
    // RTO = max(1 s, srtt + 4 rttvar) on a 10 ms timer tick (minrto_ 1, tcpTick_ 0.01).
    const bool ns2Rto = o.rto == "ns2";
    Config::SetDefault("ns3::TcpSocketBase::MinRto", TimeValue(MilliSeconds(ns2Rto ? 1000 : 200)));
    Config::SetDefault("ns3::TcpSocketBase::ClockGranularity", TimeValue(MilliSeconds(ns2Rto ? 10 : 200)));
    Config::SetDefault("ns3::TcpL4Protocol::RecoveryType", TypeIdValue(TypeId::LookupByName("ns3::TcpPrrRecovery")));
    // Linux paces only BBR without fq (unless a socket asks: --pacing 1); ns-3's BBR needs pacing on.
    Config::SetDefault("ns3::TcpSocketState::EnablePacing", BooleanValue(o.cc == "bbr" || o.pacing == 1));
    if (o.pacing == 1)
        Config::SetDefault("ns3::TcpSocketState::MaxPacingRate",
                           DataRateValue(DataRate(static_cast<uint64_t>(o.accessMbps * 1e6))));
    for (const std::string& a : o.attributes)
    {
        const auto eq = a.find('=');
        if (eq == std::string::npos || !Config::SetDefaultFailSafe(a.substr(0, eq), StringValue(a.substr(eq + 1))))
        {
            // One line, without the usage text: the caller shows the end of what the simulator said.
            std::cerr << "bsz-nssim: --attribute " << a << ": not an attribute default NAME=VALUE that ns-3 accepts\n";
            std::exit(2);
        }
    }
}

// A connection as the receiver knows it: its sender's address and port, packed in one integer.
uint64_t Endpoint(const Address& from)
{
    InetSocketAddress a = InetSocketAddress::ConvertFrom(from);
    return (static_cast<uint64_t>(a.GetIpv4().Get()) << 16) | a.GetPort();
}

// The simulated dumbbell and what the commands on stdin do to it. The constructor builds it in a
// fixed order (objects and random streams are numbered as they are made, so the order is part of
// the simulation); the object stays where main made it, since the simulator's callbacks hold it.
class Twin
{
  public:
    explicit Twin(const Options& opts);
    Twin(const Twin&) = delete;
    Twin& operator=(const Twin&) = delete;
    void Serve(std::istream& input);

  private:
    struct Transfer
    {
        uint32_t host;
        uint64_t bytes;
        double start;
        double done = -1;
        uint64_t received = 0;
        int64_t user = -1;
    };
    struct User
    {
        uint32_t host;
        double until;
        std::deque<std::pair<double, uint64_t>> next; // (think seconds, bytes)
    };
    using Command = void (Twin::*)(std::istringstream&);
    static const std::map<std::string, Command> kCommands;

    void BuildDumbbell();
    void AddFastPaths();
    void CountBottleneck();
    void AddSinks();
    void StartLongFlows();
    void WatchRecovery(Ptr<Application> a);
    void StartTransfer(uint32_t host, uint64_t bytes, int64_t user);
    void UserNext(size_t u);
    void OnShortData(Ptr<const Packet> p, const Address& from);

    void Buffer(std::istringstream& in);
    void Run(std::istringstream& in);
    void Arrivals(std::istringstream& in);
    void AddTransfer(std::istringstream& in);
    void AddUser(std::istringstream& in);
    void Transfers(std::istringstream& in);
    void Status(std::istringstream& in);

    static constexpr uint16_t kLongPort = 5001;
    static constexpr uint16_t kShortPort = 5002;
    Options o;
    NodeContainer senders;
    Ptr<Node> router, receiver;
    std::vector<uint32_t> hostIp; // each sender's address, as the receiver sees it
    std::vector<NetDeviceContainer> accessDevices;
    NetDeviceContainer bd;
    Ipv4InterfaceContainer bi;
    Ptr<BszFifo> fifo;
    Ptr<PointToPointNetDevice> port;
    uint64_t txBytes = 0, txPackets = 0;
    std::unordered_set<uint64_t> upFlows;
    std::vector<Transfer> transfers;
    std::vector<User> users;
    std::unordered_map<uint64_t, size_t> transferAt; // endpoint -> index in transfers
    TcpCounts tcp;
};

// The commands on stdin, one a line (the header comment says what each does).
const std::map<std::string, Twin::Command> Twin::kCommands{
    {"buffer", &Twin::Buffer},       {"run", &Twin::Run},           {"arrivals", &Twin::Arrivals},
    {"transfer", &Twin::AddTransfer}, {"user", &Twin::AddUser},      {"transfers", &Twin::Transfers},
    {"status", &Twin::Status},
};

Twin::Twin(const Options& opts)
    : o(opts)
{
    RngSeedManager::SetSeed(o.seed);
    RngSeedManager::SetRun(1);
    SetTcpDefaults(o);
    // Fast paths (--fast-paths 1, the default): the same simulation, event for event, in less time
    // at scale; tests/test_sim_twin.py runs both ways and compares every line. Each replaces a
    // per-packet walk over every host or flow: the router's check that a packet is not its own
    // looks at the arriving interface only (the strong end-system model; nothing here is
    // addressed to the router, so no packet is delivered differently), routes come from a hash
    // table (dumbbell_routing.h), and the receiver finds a flow's socket by its four-tuple
    // (demux_cache.cc).
    BszSetDemuxCache(o.fastPaths == 1);
    // Fail-safe: releases before 3.40 have no such attribute (bench/twin_ns3_version.py builds against
    // one); their routers check every interface, which is the same here, only slower.
    Config::SetDefaultFailSafe("ns3::Ipv4::StrongEndSystemModel", BooleanValue(o.fastPaths == 1));
    BuildDumbbell();
    if (o.fastPaths == 1)
        AddFastPaths();
    Ipv4GlobalRoutingHelper::PopulateRoutingTables();
    CountBottleneck();
    AddSinks();
    StartLongFlows();
}

void Twin::BuildDumbbell()
{
    senders.Create(o.hosts);
    router = CreateObject<Node>();
    receiver = CreateObject<Node>();
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
        hostIp.push_back(addr.Assign(d).GetAddress(0).Get());
        accessDevices.push_back(d);
        addr.NewNetwork();
    }

    PointToPointHelper bottleneck;
    // --rate-mbps counts Ethernet frames (1514 bytes for 1500 of IP), as the emulation's interface
    // counters do; a point-to-point frame is 1502, so the device runs slower by that ratio to send
    // the same packets a second, and the byte count below is of the frames Ethernet would carry.
    bottleneck.SetDeviceAttribute("DataRate",
                                  DataRateValue(DataRate(o.rateMbps * 1e6 * (1500.0 + kPpp) / (1500.0 + kEth))));
    bottleneck.SetChannelAttribute("Delay", TimeValue(Seconds(0)));
    bd = bottleneck.Install(router, receiver);
    bi = addr.Assign(bd);
    // The FIFO is the bottleneck's only queue: no queueing discipline in front of the device.
    TrafficControlHelper().Uninstall(bd.Get(0));
    fifo = CreateObject<BszFifo>();
    fifo->limit = o.bufferPackets;
    port = DynamicCast<PointToPointNetDevice>(bd.Get(0));
    port->SetQueue(fifo);
}

void Twin::AddFastPaths()
{
    // Every node asks the dumbbell's table first (priority above static routing's 0).
    auto tableOf = [](Ptr<Node> n) {
        Ptr<Ipv4> ip = n->GetObject<Ipv4>();
        Ptr<bsz::DumbbellRouting> t = CreateObject<bsz::DumbbellRouting>();
        DynamicCast<Ipv4ListRouting>(ip->GetRoutingProtocol())->AddRoutingProtocol(t, 10);
        return t;
    };
    auto ifOf = [](Ptr<NetDevice> d) {
        return static_cast<uint32_t>(d->GetNode()->GetObject<Ipv4>()->GetInterfaceForDevice(d));
    };
    auto ipOf = [](Ptr<NetDevice> d) {
        return d->GetNode()->GetObject<Ipv4>()->GetAddress(
            static_cast<uint32_t>(d->GetNode()->GetObject<Ipv4>()->GetInterfaceForDevice(d)), 0).GetLocal();
    };
    Ptr<bsz::DumbbellRouting> atRouter = tableOf(router);
    Ptr<bsz::DumbbellRouting> atReceiver = tableOf(receiver);
    for (uint32_t h = 0; h < o.hosts; h++)
    {
        Ptr<NetDevice> hostSide = accessDevices[h].Get(0), routerSide = accessDevices[h].Get(1);
        tableOf(senders.Get(h))->Add(bi.GetAddress(1), ifOf(hostSide), ipOf(routerSide));
        atRouter->Add(Ipv4Address(hostIp[h]), ifOf(routerSide), Ipv4Address(hostIp[h]));
        atReceiver->Add(Ipv4Address(hostIp[h]), ifOf(bd.Get(1)), bi.GetAddress(0));
    }
    atRouter->Add(bi.GetAddress(1), ifOf(bd.Get(0)), bi.GetAddress(1));
}

void Twin::CountBottleneck()
{
    port->TraceConnectWithoutContext("PhyTxEnd", Callback<void, Ptr<const Packet>>([this](Ptr<const Packet> p) {
                                         txBytes += p->GetSize() - kPpp + kEth;
                                         txPackets++;
                                     }));
}

// One sink for the long flows, where a flow counts as up once its first bytes arrive, and one for
// the short transfers, on their own port: a transfer is complete when the receiver has all its
// bytes (the emulated generator's receiver times it the same way).
void Twin::AddSinks()
{
    PacketSinkHelper sinkHelper("ns3::TcpSocketFactory", InetSocketAddress(Ipv4Address::GetAny(), kLongPort));
    ApplicationContainer sinkApp = sinkHelper.Install(receiver);
    Ptr<PacketSink> sink = DynamicCast<PacketSink>(sinkApp.Get(0));
    sink->TraceConnectWithoutContext(
        "RxWithAddresses",
        Callback<void, Ptr<const Packet>, const Address&, const Address&>(
            [this](Ptr<const Packet>, const Address& from, const Address&) { upFlows.insert(Endpoint(from)); }));
    sinkApp.Start(Seconds(0));

    PacketSinkHelper shortSinkHelper("ns3::TcpSocketFactory", InetSocketAddress(Ipv4Address::GetAny(), kShortPort));
    ApplicationContainer shortSinkApp = shortSinkHelper.Install(receiver);
    DynamicCast<PacketSink>(shortSinkApp.Get(0))
        ->TraceConnectWithoutContext(
            "RxWithAddresses",
            Callback<void, Ptr<const Packet>, const Address&, const Address&>(
                [this](Ptr<const Packet> p, const Address& from, const Address&) { OnShortData(p, from); }));
    shortSinkApp.Start(Seconds(0));
}

void Twin::OnShortData(Ptr<const Packet> p, const Address& from)
{
    auto it = transferAt.find(Endpoint(from));
    if (it == transferAt.end())
        return;
    Transfer& x = transfers[it->second];
    x.received += p->GetSize();
    if (x.done < 0 && x.received >= x.bytes)
    {
        x.done = Simulator::Now().GetSeconds();
        transferAt.erase(it);
        if (x.user >= 0)
            UserNext(static_cast<size_t>(x.user));
    }
}

void Twin::StartTransfer(uint32_t host, uint64_t bytes, int64_t user)
{
    transfers.push_back(Transfer{host, bytes, Simulator::Now().GetSeconds()});
    transfers.back().user = user;
    size_t id = transfers.size() - 1;
    Ptr<Socket> s = Socket::CreateSocket(senders.Get(host), TcpSocketFactory::GetTypeId());
    s->Bind();
    Address local;
    s->GetSockName(local);
    transferAt[(static_cast<uint64_t>(hostIp[host]) << 16) | InetSocketAddress::ConvertFrom(local).GetPort()] = id;
    s->SetConnectCallback(Callback<void, Ptr<Socket>>([bytes](Ptr<Socket> sock) {
                              // The send buffer (64 MB) holds any transfer here at once; Close sends
                              // the FIN once it has gone.
                              sock->Send(Create<Packet>(bytes));
                              sock->Close();
                          }),
                          Callback<void, Ptr<Socket>>([](Ptr<Socket>) {})); // never done: reported as such
    s->Connect(InetSocketAddress(bi.GetAddress(1), kShortPort));
}

void Twin::UserNext(size_t u)
{
    User& x = users[u];
    if (x.next.empty())
        return;
    auto [think, bytes] = x.next.front();
    x.next.pop_front();
    if (Simulator::Now().GetSeconds() + think > x.until)
        return;
    Simulator::Schedule(Seconds(think), [this, u, bytes]() { StartTransfer(users[u].host, bytes, u); });
}

// The long flows' loss recovery, counted as the emulation reads Linux's counters
// (monitors/tcpstats.py): data segments sent (first time or again) and sent again, timeouts,
// fast recoveries.
// ns-3 traces a timeout only through its RTO, doubled at each expiry (a new RTT sample
// sets it afresh and never exactly doubles it), so a doubling counts one timeout, backoffs
// included as Linux counts them.
void Twin::WatchRecovery(Ptr<Application> a)
{
    Ptr<Socket> s = DynamicCast<BulkSendApplication>(a)->GetSocket();
    bool ok = s->TraceConnectWithoutContext(
        "Tx", Callback<void, Ptr<const Packet>, const TcpHeader&, Ptr<const TcpSocketBase>>(
                  [this](Ptr<const Packet> p, const TcpHeader&, Ptr<const TcpSocketBase>) {
                      if (p->GetSize() > 0)
                          tcp.segs++;
                  }));
    ok &= s->TraceConnectWithoutContext(
        "Retransmission",
        Callback<void, Ptr<const Packet>, const TcpHeader&, const Address&, const Address&, Ptr<const TcpSocketBase>>(
            [this](Ptr<const Packet>, const TcpHeader&, const Address&, const Address&, Ptr<const TcpSocketBase>) {
                tcp.retrans++;
            }));
    ok &= s->TraceConnectWithoutContext("RTO", Callback<void, Time, Time>([this](Time before, Time after) {
                                            if (after == before * 2)
                                                tcp.timeouts++;
                                        }));
    ok &= s->TraceConnectWithoutContext(
        "CongState", Callback<void, TcpSocketState::TcpCongState_t, TcpSocketState::TcpCongState_t>(
                         [this](TcpSocketState::TcpCongState_t, TcpSocketState::TcpCongState_t now) {
                             if (now == TcpSocketState::CA_RECOVERY)
                                 tcp.recoveries++;
                         }));
    if (!ok)
        std::cerr << "bsz-nssim: a TCP trace source is missing in this ns-3\n";
}

void Twin::StartLongFlows()
{
    Ptr<UniformRandomVariable> start = CreateObject<UniformRandomVariable>();
    for (uint32_t f = 0; f < o.flows; f++)
    {
        BulkSendHelper bulk("ns3::TcpSocketFactory", InetSocketAddress(bi.GetAddress(1), kLongPort));
        bulk.SetAttribute("MaxBytes", UintegerValue(0));
        bulk.SetAttribute("SendSize", UintegerValue(64 * 1448));
        ApplicationContainer app = bulk.Install(senders.Get(f % o.hosts));
        Time at = Seconds(start->GetValue(0, o.startSpreadS));
        app.Start(at);
        // The application makes its socket when it starts: watch it just after.
        Ptr<Application> a = app.Get(0);
        Simulator::Schedule(at + NanoSeconds(1), [this, a]() { WatchRecovery(a); });
    }
}

void Twin::Serve(std::istream& input)
{
    std::string line;
    std::cout << std::fixed;
    std::cout.precision(6);
    std::cout << "{\"ready\": true, \"flows\": " << o.flows << "}" << std::endl;
    while (std::getline(input, line))
    {
        std::istringstream in(line);
        std::string cmd;
        in >> cmd;
        if (cmd == "quit")
            break;
        auto it = kCommands.find(cmd);
        if (it == kCommands.end())
            std::cout << "{\"error\": \"unknown command\"}" << std::endl;
        else
            (this->*(it->second))(in);
    }
}

void Twin::Buffer(std::istringstream& in)
{
    double b = -1;
    in >> b;
    if (!(b >= 1 && b <= 1e8))
    {
        std::cout << "{\"error\": \"buffer: a packet count >= 1\"}" << std::endl;
        return;
    }
    fifo->limit = static_cast<uint32_t>(b);
    std::cout << "{\"buffer\": " << fifo->limit << "}" << std::endl;
}

void Twin::Run(std::istringstream& in)
{
    double t = -1;
    in >> t;
    if (!(t > 0 && t <= 1e5))
    {
        std::cout << "{\"error\": \"run: seconds > 0\"}" << std::endl;
        return;
    }
    uint64_t bytes0 = txBytes, packets0 = txPackets, drops0 = fifo->drops;
    TcpCounts tcp0 = tcp;
    double t0 = Simulator::Now().GetSeconds();
    fifo->Take();
    Simulator::Stop(Seconds(t));
    Simulator::Run();
    double t1 = Simulator::Now().GetSeconds();
    BszFifo::Stats q = fifo->Take();
    std::cout << "{\"t0\": " << t0 << ", \"t1\": " << t1 << ", \"bytes\": " << txBytes - bytes0
              << ", \"packets\": " << txPackets - packets0 << ", \"drops\": " << fifo->drops - drops0
              << ", \"flows_up\": " << upFlows.size() << ", \"queue_mean\": " << q.area / (t1 - t0)
              << ", \"queue_max\": " << q.maxLen << ", \"tcp\": {\"out_segs\": " << tcp.segs - tcp0.segs
              << ", \"retrans_segs\": " << tcp.retrans - tcp0.retrans
              << ", \"timeouts\": " << tcp.timeouts - tcp0.timeouts
              << ", \"recoveries\": " << tcp.recoveries - tcp0.recoveries << "}, \"drop_times\": [";
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

// The arrival process at the bottleneck (what the emulation traces on the switch's port into the
// line): every packet offered, queued or dropped, over `seconds`.
void Twin::Arrivals(std::istringstream& in)
{
    double t = -1;
    in >> t;
    if (!(t > 0 && t <= 60))
    {
        std::cout << "{\"error\": \"arrivals: seconds from 0 to 60\"}" << std::endl;
        return;
    }
    double t0 = Simulator::Now().GetSeconds();
    fifo->arrivals.clear();
    fifo->recordArrivals = true;
    Simulator::Stop(Seconds(t));
    Simulator::Run();
    fifo->recordArrivals = false;
    std::cout << "{\"t0\": " << t0 << ", \"t1\": " << Simulator::Now().GetSeconds() << ", \"arrivals\": [";
    for (size_t i = 0; i < fifo->arrivals.size(); i++)
        std::cout << (i ? ", " : "") << fifo->arrivals[i];
    std::cout << "]}" << std::endl;
    fifo->arrivals.clear();
}

void Twin::AddTransfer(std::istringstream& in)
{
    double t = -1, host = -1, bytes = -1;
    in >> t >> host >> bytes;
    if (in.fail() || !(t >= Simulator::Now().GetSeconds() && host >= 0 && host < o.hosts && bytes >= 1))
    {
        std::cout << "{\"error\": \"transfer: a time not past, a host index and a byte count >= 1\"}" << std::endl;
        return;
    }
    uint32_t h = static_cast<uint32_t>(host);
    uint64_t b = static_cast<uint64_t>(bytes);
    Simulator::Schedule(Seconds(t) - Simulator::Now(), [this, h, b]() { StartTransfer(h, b, -1); });
    std::cout << "{\"transfer\": " << t << "}" << std::endl;
}

void Twin::AddUser(std::istringstream& in)
{
    double host = -1, until = -1, think = -1, bytes = -1;
    in >> host >> until;
    User u{0, until, {}};
    bool ok = !in.fail() && host >= 0 && host < o.hosts && until >= 0;
    while (ok && in >> think >> bytes)
    {
        ok = think >= 0 && bytes >= 1;
        u.next.emplace_back(think, static_cast<uint64_t>(bytes));
    }
    if (!ok || u.next.empty())
    {
        std::cout << "{\"error\": \"user: a host index, an end time and (think seconds, bytes) pairs\"}" << std::endl;
        return;
    }
    u.host = static_cast<uint32_t>(host);
    users.push_back(std::move(u));
    UserNext(users.size() - 1);
    std::cout << "{\"user\": " << users.size() - 1 << "}" << std::endl;
}

void Twin::Transfers(std::istringstream&)
{
    std::cout << "{\"transfers\": [";
    for (size_t i = 0; i < transfers.size(); i++)
    {
        const Transfer& x = transfers[i];
        std::cout << (i ? ", " : "") << "[" << x.host << ", " << x.bytes << ", " << x.start << ", " << x.done << "]";
    }
    std::cout << "]}" << std::endl;
}

void Twin::Status(std::istringstream&)
{
    std::cout << "{\"t\": " << Simulator::Now().GetSeconds() << ", \"flows_up\": " << upFlows.size() << "}"
              << std::endl;
}

} // namespace

int main(int argc, char** argv)
{
    Options o = Parse(argc, argv);
    Twin twin(o); // builds the dumbbell; the simulator's callbacks hold it until Destroy
    twin.Serve(std::cin);
    Simulator::Destroy();
    return 0;
}
