"""Name parts and value pools of the synthetic benchmark (moved from generate.py).

Part of the output's definition: changing any pool changes the generated files.
"""

from __future__ import annotations

# ---------------------------------------------------------------------------------------------
# Name parts. Everything is ASCII except a few names that exercise DPR's NFD normalisation.
# No part may be a wh-word: question_type() must see only the template's wh-word.
# ---------------------------------------------------------------------------------------------
FIRST_NAMES = (
    "Marta Harlan Clara Tobias Ingrid Felix Anselm Beatrix Casimir Dagny Elias Freya Gustav Hedda "
    "Ivo Jolanta Konrad Liesel Matthias Nora Oskar Petra Quentin Rosa Sven Thea Ulrich Vera Wendel "
    "Xenia Yannick Zora Agnes Bruno Cecilia Dmitri Edith Fabian Greta Hugo Irene Jonas Katrin Leon "
    "Magda Nils Olga Pavel Ruth Stefan Tilda Viktor Wanda Arvid Birgit Cyril Dora Emil Flora "
    "Gideon "
    "Hanna Isak Johanna Karl Lotte Milan Nadia Otto Paula Rafael Sabine Teodor Ursula Valentin "
    "Alma "
    "Bertil Carla Dorian Elin Frida Gregor Helga Imre Judit Kasimir Lena Mirko Nelly Orla Piet "
    "Ragna Simon Tove Vilma Anton Blanka Cosmin Daria Erik Fenna Jürgen Zoë Åsa Renée Søren Tomás"
).split()
LAST_ROOTS = (
    "Lind Berg Hal Kess Mor Dal Ek Fal Gran Holm Brand Sand Stein Wal Ros Fink Hart Lang Adler "
    "Kron Vos Strom Wend Bauer Nord Sten Hag Ask Bru Carl Dahl Eng Fors Gyl Hed Jar Kal Lund Mal "
    "Nyb Ols Pal Rud Sjo Tor Udd Vik Wes Zell Amb Bell Cor Dor Fer Gal Lor Mar Nov Orb Pet"
).split()
LAST_SUFFIXES = "qvist ler sen ova mann ard ini berg ton ecki".split()
OCCUPATIONS = (
    "chemist painter architect engineer botanist composer poet surgeon astronomer geologist "
    "historian sculptor photographer mathematician linguist economist cartographer violinist "
    "novelist physicist journalist lawyer inventor diplomat philosopher zoologist playwright "
    "pianist explorer archaeologist engraver printer shipbuilder brewer banker teacher judge pilot"
).split()
PLACE_ROOTS = (
    "Bran Esk Tall Hart Wil Ash Marl Thorn Kel Dun Ros Fen Gal Hol Lin Mor Nor Ost Pel Quen Rav "
    "Sel Tor Ul Var Wes Yar Zel Ald Bel Cal Dor El Far Glen Hal Ir Jor Kar Lan Mar Ned Or Pen Rud "
    "Sten Tam Ulv Vel Wend Bir Cor Dal Eb Fal Gar Hes Ivel Kirk Lor Mel Nes Ot Pol Rin Sar Tev "
    "Vin Arn Bex Cran Drum Ems Frod Gil Hex Ink Lud Mab Nan Rok Skel Tib Brom Clif Dew Fro Grim "
    "Lam Pry Sko"
).split()
PLACE_SUFFIXES = (
    "holm ford wick by ton stad berg burg mouth field dale vik hem ley minster bridge haven "
    "thorpe gate moor well stead wood ham ness port cross mere hall heim sund lund borg vale "
    "combe hurst"
).split()
REGIONS = (
    "Ostmark Veldoria Carrow Lowmoor Estria Brenland Halvania Korsland Marisca Norvale Peltoria "
    "Quarnia Rhosmark Sundale Tavria Umbria Valdmark Westerland Yrland Zevania Aldmark Bothnia "
    "Caldera Dunmark Elvaria Fjordane Galmark Hestria Istria Jutmark Kaldera Lorvania Morland "
    "Nessaria Orvania Pomeria Ravenmark Solvania Teramark Ulmark Varland Wenmark Amberland "
    "Blackmoor Coldvale Eastmarch Greyhaven Highvale Ironmark Saltmarsh"
).split()
ORG_ADJECTIVES = (
    "Northern Royal Meridian Union Atlantic Central Eastern Western Imperial United Silverline "
    "Harbour Crown Star Lakeside Highland Riverside Coastal National Provincial"
).split()
# (kind in title, short noun, member noun, leader role)
ORG_KINDS = (
    ("Railway Company", "company", "employees", "chairman"),
    ("Savings Bank", "bank", "employees", "director"),
    ("Symphony Orchestra", "orchestra", "musicians", "conductor"),
    ("Football Club", "club", "members", "chairman"),
    ("Institute of Technology", "institute", "students", "rector"),
    ("Botanical Society", "society", "members", "president"),
    ("Shipbuilding Company", "company", "workers", "director"),
    ("Observatory", "observatory", "staff members", "director"),
    ("Publishing House", "publisher", "employees", "director"),
    ("Brewery", "brewery", "workers", "manager"),
    ("Museum of Art", "museum", "employees", "director"),
    ("Opera House", "opera house", "performers", "director"),
    ("Mining Company", "company", "miners", "chairman"),
    ("Textile Mill", "mill", "weavers", "manager"),
    ("Trading Company", "company", "employees", "chairman"),
    ("General Hospital", "hospital", "nurses", "director"),
    ("Academy of Music", "academy", "students", "rector"),
    ("Glassworks", "glassworks", "workers", "manager"),
    ("Chess Club", "club", "members", "president"),
    ("Rowing Club", "club", "members", "president"),
    ("Steamship Company", "company", "sailors", "chairman"),
    ("Historical Society", "society", "members", "president"),
    ("Printing Works", "printing works", "printers", "manager"),
    ("Porcelain Factory", "factory", "workers", "director"),
    ("Teachers College", "college", "students", "principal"),
)
# (kind in title, short noun, description)
EVENT_KINDS = (
    ("Marathon", "marathon", "road running race"),
    ("Chess Olympiad", "olympiad", "team chess competition"),
    ("Regatta", "regatta", "sailing competition"),
    ("Cycling Race", "race", "road cycling race"),
    ("Piano Competition", "competition", "competition for young pianists"),
    ("Music Festival", "festival", "summer music festival"),
    ("Film Festival", "festival", "festival of independent cinema"),
    ("Trade Fair", "fair", "trade fair for regional manufacturers"),
    ("Book Fair", "fair", "fair for publishers and booksellers"),
    ("Industrial Exhibition", "exhibition", "exhibition of machinery and crafts"),
    ("Rowing Championship", "championship", "national rowing championship"),
    ("Poetry Festival", "festival", "festival of poetry and song"),
    ("Choir Festival", "festival", "gathering of amateur choirs"),
    ("Horse Race", "race", "horse race on the common"),
    ("Ski Race", "race", "cross-country ski race"),
)
# (kind, creator verb in statements, creator verb in questions, length unit, copies noun)
WORK_KINDS = (
    ("novel", "written", "wrote", "pages", "copies"),
    ("film", "directed", "directed", "minutes", "tickets"),
    ("opera", "composed", "composed", "minutes", "tickets"),
    ("album", "recorded", "recorded", "minutes", "copies"),
    ("play", "written", "wrote", "minutes", "tickets"),
)
WORK_ADJECTIVES = (
    "Silent Distant Burning Hidden Last Broken Golden Frozen Quiet Northern Endless Bitter Gentle "
    "Crimson Empty Lonely Restless Secret Shining Wandering Forgotten Iron Painted Sleeping "
    "Drowned Salt Hollow Pale Scarlet Winter Summer Midnight Early Little Great Lost Second "
    "Narrow Open Amber"
).split()
WORK_NOUNS = (
    "Harbour Garden Orchard Lantern River Bridge Mirror Island Tower Forest Winter Voyage Meadow "
    "Letter Shore Kingdom Mountain Valley Orchestra Window Compass Anchor Lighthouse Carriage "
    "Clockmaker Bell Fisherman Pilgrim Sparrow Heron Fox Wolf Archive Monastery Tide Ember "
    "Horizon Crossing Frontier Canal Quarry Furnace Granary Ferry Signal Parade Threshold"
).split()
MONTHS = (
    "January February March April May June July August September October November December"
).split()

# Value pools for answers that are not names, numbers or dates.
SUBJECTS = (
    "classical philology", "applied mathematics", "church history", "mineralogy", "land surveying",
    "organic chemistry", "comparative law", "naval architecture", "moral philosophy",
    "plant physiology", "music theory", "political economy", "medieval art", "marine biology",
    "structural engineering", "ancient languages", "celestial mechanics", "forestry",
    "hydraulic engineering", "agricultural science",
)
TRAVEL = (
    "by overnight train", "by river steamer", "on horseback", "by mail coach", "on foot",
    "by bicycle", "aboard a cargo ship", "by seaplane", "by motor car", "by horse-drawn sleigh",
    "by canal barge", "by coastal ferry", "in a borrowed van", "by cable car and mule",
)
FINANCE = (
    "through public subscription", "with loans from local merchants", "by a royal charter",
    "through a town lottery", "with donations from former students", "by selling shares to farmers",
    "with money from a wealthy widow", "through a levy on harbour traffic",
    "with a grant from the regional council", "by mortgaging its first building",
)
SELECTION = (
    "by public ballot", "through regional qualifiers", "by invitation only", "by drawing lots",
    "through an open audition", "by a jury of former winners", "through a written examination",
    "on the recommendation of local clubs",
)
ACCESS = (
    "by narrow-gauge railway", "by ferry across the lake", "along a winding mountain road",
    "by bus from the coast", "on foot along the old pilgrim path", "by river boat",
    "by a single-track branch line", "across a toll bridge",
)
KNOWN_FOR = (
    "careful record keeping", "its apprenticeship scheme", "a large lending library",
    "its charitable work among sailors", "an unusual clock tower", "generous pensions",
    "its summer open days", "a long rivalry with a neighbouring town", "strict dress rules",
    "its annual winter concert", "a collection of antique maps", "early use of electric light",
)
INDUSTRIES = (
    "salt mining", "wool weaving", "herring fishing", "glass making", "timber rafting",
    "copper smelting", "flax growing", "cheese making", "brick making", "shipbuilding",
    "hop growing", "peat cutting", "slate quarrying", "lace making",
)
THEMES = (
    "the industrial heritage of the coast", "river life", "migration and memory",
    "the future of the railways", "light and water", "northern folk traditions",
    "the history of printing", "craft and machine", "the sea and its trades", "old and new towns",
)
INSPIRATIONS = (
    "a shipwreck off the northern coast", "the letters of a lighthouse keeper",
    "a childhood spent in a mining town", "an old court record", "a folk tale about a drowned bell",
    "a newspaper report about a flood", "the diaries of a travelling surgeon",
    "a long winter in a mountain village", "a painting of a harbour at dawn",
)
PRAISE = (
    "spare dialogue", "bold use of colour", "patient pacing", "unusual structure",
    "vivid landscapes", "restrained humour", "careful research", "haunting final scene",
)
LANDMARKS = ("Old Tollhouse", "Grain Exchange", "Weighhouse", "Salt Tower", "Old Mint",
             "Cloth Hall", "Watermill", "Customs House")

TYPE_NAMES = ("person", "organisation", "place", "event", "work")
TYPE_PROBS = (0.30, 0.20, 0.15, 0.15, 0.20)
# Entities per distinct name: 1.5 means about a third of all entities share their name with
# another entity of the same type ("Marta Lindqvist (chemist)" / "Marta Lindqvist (painter)").
NAME_SHARE = 1.5


PLACE_KINDS = ("town", "village", "market town", "port town", "river town")
