"""The ``blind11`` note and query templates of the ``conditions`` and ``films`` generators.

An eleventh variant, written by a helper for one blind measurement; measured blind (facts rules
15 and 16) and not read.
Chosen by ``templates="blind11"`` in :mod:`dpsynrag.eval.datasets_ordinary`, which maps the
variant name to these sets. Same placeholders and rules as the other variants there (each
note holds its answer verbatim; queries share no word with any answer).
"""

from __future__ import annotations

from dpsynrag.eval.template_set import TemplateSet

__all__ = ["CONDITION_TEMPLATES_BLIND11", "FILM_TEMPLATES_BLIND11"]

# Blind11: for one blind measurement only; whoever tunes the system must not read these.
CONDITION_TEMPLATES_BLIND11 = TemplateSet(notes=(
    "Saw {name} today ({date}). {age}, usually a rare attender. Describes {symptoms}, worse "
    "over the past fortnight. Examined; nothing alarming found. History and findings in "
    "keeping with {condition}. Explained the likely course and started {treatment}. Happy "
    "to review if no improvement. - Dr {doctor}",
    "Hi Dr {doctor}, it's {name} (I'm {age}, date of birth is on file). Just a quick update "
    "since I saw you on {date}. The {treatment} seems to be helping my {condition} a bit, "
    "but I still get {symptoms} now and then. Is that normal or should I book in again? "
    "Thanks so much",
    "{condition} at {age}?? Anyone else?\n\nPosted by {name} on {date}\n\nSo after weeks of "
    "{symptoms} I finally got an appointment and Dr {doctor} told me that's what it is. I "
    "honestly thought it was just stress. I've been started on {treatment}. How long did it "
    "take before you felt normal again?",
    "Handing over {name} in side room 3. {age}, came up from the assessment unit on {date} "
    "with {symptoms}. Bloods and obs done, and it turned out to be {condition}. Dr {doctor} "
    "has written up {treatment}; first dose given at six. Family aware, observations "
    "stable, nothing outstanding for nights.",
    "Subject: update on Dad\n\nHi all,\n\nSpent the afternoon ({date}) at the hospital with "
    "Dad. Short version: the consultant thinks it's {condition}, which would explain the "
    "{symptoms} he's been putting up with since the spring. They've started him on "
    "{treatment} and want to see him again in six weeks. He says he's fine and we're not to "
    "fuss.\n\nHe's registered as {name}, {age}, if any of you ring the ward - the team is "
    "under Dr {doctor}.\n\nLove to all x",
    "{date}. Another rotten night with the {symptoms}. Finally rang the surgery and got in "
    "with Dr {doctor} at ten to four. {condition}. Not what I expected to hear, but at least "
    "it has a name now. Picked up the {treatment} on the way home. {name}, {age}, feeling "
    "every year of it.",
    "Morning, {name} here. I won't be in this week, sorry. I've been diagnosed with "
    "{condition} - Dr {doctor} saw me on {date} after I'd had {symptoms} most of last "
    "week. I'm on {treatment} and the fit note should come through by email. Will keep you "
    "posted.",
    "Dear Dr {doctor},\n\nI am writing to ask for a referral for a second opinion. I am "
    "{age} and since the start of the year I have suffered {symptoms}. At my appointment on "
    "{date} I was given {treatment}, and the letter I received afterwards records the "
    "diagnosis as {condition}. I would like this confirmed by a specialist before I "
    "continue.\n\nYours sincerely,\n{name}",
    "It's been a while since I posted. On {date} I finally got an answer. For most of the "
    "year I'd been living with {symptoms}, and I'd half convinced myself it was all in my "
    "head. Dr {doctor} listened, ran a couple of tests, and now I have a word for it: "
    "{condition}. I'm {age}, I've started {treatment}, and this blog is going to be a bit "
    "different from now on. - {name}",
    "Call back to {name} ({age}) at 19:40 on {date}. Caller reports {symptoms} over several "
    "days; no difficulty breathing, eating and drinking normally. Advised to carry on with "
    "{treatment} as started by Dr {doctor} earlier in the week and to ring again if worse. "
    "Working diagnosis from the daytime record: {condition}",
    "S - {name}, {age}, bed 7, unsettled overnight with {symptoms}.\nB - Admitted {date} "
    "under Dr {doctor}; {condition} confirmed on the admission clerking.\nA - Obs within "
    "range, pain controlled, alert and orientated.\nR - Continue {treatment}; escalate if "
    "the early warning score rises; family visiting after lunch.",
    "KEEP OUT OF THE REACH AND SIGHT OF CHILDREN\n{treatment}\nFor: {name}    Dispensed: "
    "{date}\nPrescriber: Dr {doctor}\nIndication: {condition}\nCounter note: mentioned "
    "{symptoms} at collection; age {age} checked against the script.",
    "Questions for Dr {doctor} ({date}) - write the answers underneath:\n1) is the "
    "{treatment} safe long term?\n2) why do I still get {symptoms}?\n3) does {condition} run "
    "in families - Mum had something similar\n4) repeat prescription before the holiday\n"
    "({name}, {age})",
    "Visit 2 of 4, {date}. Supported {name} ({age}) with lunch and tablets; took the "
    "{treatment} without any fuss. Still mentioning {symptoms} - I've flagged it for the "
    "district nurse. Daughter says Dr {doctor} is treating it as {condition} since the last "
    "review. Kitchen left tidy, key back in the safe.",
), queries=(
    "My GP surgery won't pick up the phone. For ten days I've had {symptoms}. What's the "
    "likely name for it?",
    "{asker} here - my husband has {symptoms} and refuses to see anyone. What could he have?",
    "Looking after my mother-in-law this month and she's got {symptoms}. Which condition "
    "should I mention to the practice?",
    "Nursing student revising: a textbook case lists {symptoms}. Which condition is being "
    "described?",
    "Question for the pharmacist from {asker}: I've been getting {symptoms}. What do you "
    "think is going on?",
    "Hi, it's {asker}. Sorry to message out of hours. Since the weekend I've been having "
    "{symptoms}. Any idea what that points to?",
    "Are {symptoms} signs of something in particular?",
    "What would explain {symptoms} in someone otherwise fit?",
    "My brother {asker} keeps searching online for {symptoms} and scaring himself. What's "
    "the most likely answer?",
    "Quiz round on medicine: which illness classically shows {symptoms}?",
    "Hello, first time posting. I'm in my forties and for a month or so I've noticed "
    "{symptoms}. Should I be worried, and what might it turn out to be?",
))

FILM_TEMPLATES_BLIND11 = TemplateSet(notes=(
    "omg {name} here, just got out of {title} and I can't stop thinking about it. {plot} - "
    "who even comes up with that?? {director} is a genius. go before it leaves cinemas, "
    "{stars}/5 easy ({date})",
    "I went into {title} on {date} knowing nothing except that {director} had made it, which "
    "is probably the best way to see it. On paper it's a standard {genre}, but it takes its "
    "time with {plot}, and the final twenty minutes are as good as anything I've seen this "
    "year. Not perfect - the middle sags - but {stars} stars from me. ({name})",
    "{date}. Wet and windy all day so we stayed in, lit the fire and we watched {title} "
    "({director}). A {genre} with {plot}; not bad at all. {stars}/5. - {name}",
    "Looking for recommendations! My favourite is {title} - I love a {genre} that throws in "
    "{plot} and somehow makes it work. Anything else along those lines? I've already seen "
    "most of what {director} has done. Thanks, {name} ({date})",
    "Dear {name},\n\nOur records show that the following item, borrowed on {date}, has not "
    "yet been returned:\n\n    {title} - {genre}, {director}\n\nA late charge of 50p a day "
    "now applies. If you have already returned it, please ignore this letter.\n\nCorner "
    "Video Library",
    "Happy birthday {name}! Can't believe it's been a year since we queued in the rain for "
    "{title} ({date}, in case you've forgotten). Still laughing about your face during "
    "{plot}. Lots of love xx",
    "52 films in 52 weeks, update from {name} ({date}). Week 31: {title}. {director}, "
    "{genre}, {stars}/5. Didn't expect {plot} to land as well as it did. Week 32 "
    "suggestions welcome.",
    "{title}. Still thinking about it two days later. {plot}, and {director} never once "
    "over-explains. Caught it on {date}; {stars} stars, and I don't hand those out lightly. "
    "- {name}",
    "Hostel common room, {date}. Rain again, so half the dorm ended up round the laptop "
    "watching {title}. Nobody had heard of {director}, and the couple from Lyon kept asking "
    "why anyone would make a {genre} about {plot}. I'd give it {stars}. - {name}'s travel "
    "journal",
    "For {name} - {date}\nYou kept asking what I meant about {plot}, so here it is: {title}, "
    "{director}'s best {genre} in my opinion. Watch it with the lights off. x",
    "a poem by {name}, {date}\n\nwe put on {title}\nwhile the kettle cooled -\n{plot},\nand "
    "{director} making it all\nlook easy.\n{stars} stars, hands down.",
    "{name}'s list, {date}:\n- milk, eggs, bin bags\n- batteries for the remote\n- {title} "
    "on DVD (that {genre} with {plot})\n- card for Gran",
    "1/3 finally watched {title} ({date}) and I have thoughts\n2/3 {plot}. in a {genre}. by "
    "{director}. somehow it works\n3/3 {stars}/5, go and watch it - {name}",
    "Thanks so much for having us on {date}! {title} was such a good pick - I'd never have "
    "chosen a {genre} myself, but {plot} had me hooked. Next one's at ours. Love, {name}",
), queries=(
    "Trying to track down a {genre} my friend keeps quoting - it had {plot}. Any idea which "
    "one?",
    "{asker} here. A film I loved as a kid had {plot}. What was it called?",
    "Looking to rewatch a {genre} I caught years ago on a flight: {plot}. What's its name?",
    "My partner and I can't agree on what this film was called. It had {plot}. Help!",
    "I've described this one to so many people: {plot}. Surely someone knows it?",
    "{asker} asking: any idea what film has {plot} in it? I think it was a {genre}.",
    "Podcast listener question: what's that {genre} with {plot}? Hosts couldn't remember "
    "either.",
    "Pub quiz tiebreak, we got it wrong - which film had {plot}?",
    "A {genre}, maybe from my teens, where there's {plot}. Does that sound familiar to "
    "anyone?",
    "Which movie am I thinking of? {plot}, and it's a {genre}.",
    "Film-night planning from {asker}: we want that {genre} with {plot} but nobody "
    "remembers its title.",
))
